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
# "30s": how long its containers take to exit after SIGTERM (a checkpoint on preemption,
# say), capped by the pod's termination grace period; default 1 s
STOP = PREFIX + "stop"


def env_name(key: str) -> str:
    """The container env var that gives the same hint: ``exit-code`` → ``SANDBOX_EXIT_CODE``.

    A real program decides its own runtime and exit code; letting the workload's env say
    so means a portal that offers no annotation field can still drive every outcome.
    """
    return "SANDBOX_" + key[len(PREFIX) :].upper().replace("-", "_")


def _env_hint(pod: dict[str, Any], key: str) -> str | None:
    name = env_name(key)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for var in container.get("env") or []:
            if var.get("name") == name and "value" in var:
                return str(var["value"])
    return None


def get(pod: dict[str, Any], key: str, default: str = "") -> str:
    """The hint from the pod's annotations, else from its containers' env, else ``default``."""
    annotations = pod["metadata"].get("annotations") or {}
    if key in annotations:
        return str(annotations[key])
    hint = _env_hint(pod, key)
    return default if hint is None else hint


def flag(pod: dict[str, Any], key: str) -> bool:
    return get(pod, key).lower() in ("true", "1", "yes")
