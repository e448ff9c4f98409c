"""Pod-template annotations that steer the simulation (nothing else reads them)."""

from __future__ import annotations

from typing import Any

PREFIX = "sandbox.gpu-portal.dev/"
DURATION = PREFIX + "duration"  # "90s", "5m", "1h": how long a training container runs
EXIT_CODE = PREFIX + "exit-code"  # container exit code when it finishes
WORKLOAD = PREFIX + "workload"  # "training" | "inference" (default from restartPolicy)
IDLE = PREFIX + "idle"  # "true": holds its GPUs at ~0 % utilisation
HOT = PREFIX + "hot"  # "true": its GPUs run above 85 °C
FB_FULL = PREFIX + "fb-full"  # "true": framebuffer nearly full (< 1 GiB free)


def get(pod: dict[str, Any], key: str, default: str = "") -> str:
    return str((pod["metadata"].get("annotations") or {}).get(key, default))


def flag(pod: dict[str, Any], key: str) -> bool:
    return get(pod, key).lower() in ("true", "1", "yes")
