"""The synthetic trainer's checkpoints, kept on its PersistentVolumeClaim.

A training container with ``CHECKPOINT_DIR`` in its env (the portal's checkpoint contract,
docs/jobs.md) saves a checkpoint every ``logs.CHECKPOINT_EVERY`` steps into the claim
mounted there. The claim outlives the pod: a container started again with
``RESTART_ATTEMPT`` above 0 on the same claim resumes from the newest step saved, runs only
the steps left, and says so in its log. What a claim holds is written when the container
stops for any reason (it finishes, its GPU fails, it is killed, its node goes down): the
steps it completed by then, rounded down to the last checkpoint.
"""

from __future__ import annotations

from typing import Any

from sandbox.logs import CHECKPOINT_EVERY, step_seconds, total_steps
from sandbox.state import Cluster
from sandbox.store import Obj


def _env(container: Obj) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


def claim_of(pod: Obj) -> tuple[str, str] | None:
    """``(directory, claim)``: the PersistentVolumeClaim mounted at the first container's
    ``CHECKPOINT_DIR``, if it has one."""
    containers = pod["spec"].get("containers") or []
    if not containers:
        return None
    directory = _env(containers[0]).get("CHECKPOINT_DIR")
    if not directory:
        return None
    mount = next(
        (m for m in containers[0].get("volumeMounts") or [] if m.get("mountPath") == directory),
        None,
    )
    volume = next(
        (v for v in pod["spec"].get("volumes") or [] if mount and v.get("name") == mount["name"]),
        None,
    )
    claim = ((volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
    return (directory, str(claim)) if claim else None


def _key(namespace: str, claim: str) -> str:
    return f"ckpt/{namespace}/{claim}"


def restart_attempt(pod: Obj) -> int:
    containers = pod["spec"].get("containers") or []
    try:
        return int(_env(containers[0]).get("RESTART_ATTEMPT", "0")) if containers else 0
    except ValueError:
        return 0


def resume_step(cluster: Cluster, pod: Obj) -> int:
    """The step a starting container resumes from: the claim's newest checkpoint when it is
    a restart (``RESTART_ATTEMPT`` > 0), else 0."""
    found = claim_of(pod)
    if found is None or restart_attempt(pod) <= 0:
        return 0
    saved = cluster.store.meta_get(_key(pod["metadata"]["namespace"], found[1])) or {}
    return int(saved.get("step", 0))


def save(cluster: Cluster, pod: Obj, life: dict[str, Any], until: float) -> None:
    """Write the newest checkpoint the container completed by ``until`` to its claim."""
    found = claim_of(pod)
    if found is None or life.get("kind") != "training" or life.get("started") is None:
        return
    planned = float(life.get("planned") or life.get("duration") or 0)
    done = int(max(0.0, until - float(life["started"])) // step_seconds(planned))
    resumed = int(life.get("resume_step", 0))
    step = min(total_steps(planned), resumed + done) // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    if step > resumed:
        cluster.store.meta_set(
            _key(pod["metadata"]["namespace"], found[1]),
            {"step": step, "path": f"{found[0]}/step-{step}.pt", "pod": pod["metadata"]["name"]},
        )
