"""Kubeflow Trainer's TrainJob as the portal writes it: the names Trainer's torch runtimes
use, and the trainer's pod a TrainJob makes (for the checks that look at pods)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
# The trainer's replicated job and container: Trainer's shipped torch runtimes name both so.
TRAINER_JOB = "node"
TRAINER_CONTAINER = "node"
# The manager the portal's runtime patch is filed under.
TRAINER_PATCH_MANAGER = "gpu-portal.dev/manager"
_TRAINER_FIELDS = ("command", "args", "env")


def trainer_pods(trainjob: Obj) -> Iterator[tuple[str, Obj]]:
    """(path, pod template) of each replicated job the TrainJob's runtime patches reach:
    the patch's pod template, its container ``node`` given the trainer's image, command,
    args, env and ``resourcesPerNode`` as Trainer puts them there. What the runtime itself
    adds is not known here (the checks see what the portal asks for)."""
    spec = trainjob.get("spec") or {}
    trainer = spec.get("trainer") or {}
    node = {
        "name": TRAINER_CONTAINER,
        "image": trainer.get("image", ""),
        **{k: trainer[k] for k in _TRAINER_FIELDS if k in trainer},
        "resources": trainer.get("resourcesPerNode") or {},
    }
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for j, rjob in enumerate((template.get("spec") or {}).get("replicatedJobs") or []):
            pod = copy.deepcopy(((rjob.get("template") or {}).get("spec") or {}).get("template"))
            pod = pod if isinstance(pod, dict) else {}
            pod_spec = pod.setdefault("spec", {})
            containers = pod_spec.get("containers") or []
            pod_spec["containers"] = [
                {**node, **c} if c.get("name") == TRAINER_CONTAINER else c for c in containers
            ] or [node]
            path = (
                f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}]"
                ".template.spec.template"
            )
            yield path, pod
