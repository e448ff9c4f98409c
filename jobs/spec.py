"""The job spec: the product's contract.

The REST API and the submit form both produce a ``JobSpec``; manifest builders
turn it into Kubernetes objects. JSON field names are fixed (external clients
depend on them). This module is pure: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

import yaml

from cluster.priority_classes import Priority

Kind = Literal["training", "inference", "workspace"]
Sharing = Literal["exclusive", "mig", "shared"]

KINDS: tuple[Kind, ...] = ("training", "inference", "workspace")
SHARINGS: tuple[Sharing, ...] = ("exclusive", "mig", "shared")


@dataclass(frozen=True)
class GpuRequest:
    count: int = 0
    product: str | None = None  # value of node label nvidia.com/gpu.product
    sharing: Sharing = "exclusive"
    mig_profile: str | None = None  # e.g. "1g.10gb"; only with sharing="mig"


@dataclass(frozen=True)
class VolumeMount:
    claim: str  # PersistentVolumeClaim name in the team namespace
    mount_path: str
    read_only: bool = False


@dataclass(frozen=True)
class Checkpoint:
    """Where a training job keeps its checkpoints: a PersistentVolumeClaim of the team's
    namespace, mounted read-write at ``mount_path``; the container gets ``CHECKPOINT_DIR``
    (that path) and ``RESTART_ATTEMPT`` (0, then 1, 2 … when the portal runs it again after
    a GPU failure), so the script resumes from its newest checkpoint."""

    claim: str
    mount_path: str


@dataclass(frozen=True)
class JobSpec:
    team: str
    name: str
    kind: Kind
    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    gpu: GpuRequest = field(default_factory=GpuRequest)
    cpu: str | None = None  # Kubernetes quantity; None → derived per GPU
    memory: str | None = None
    priority: Priority = "normal"
    # A cluster's name, or "any": where it starts soonest (``jobs.services.placement``).
    cluster: str = "any"
    volumes: tuple[VolumeMount, ...] = ()
    # training only
    launcher: str = "job"  # job (Indexed Job), pytorchjob (Kubeflow v1), trainjob (Trainer v2)
    checkpoint: Checkpoint | None = None
    workers: int = 1
    max_runtime_seconds: int | None = None
    retries: int = 0
    # inference only
    replicas: int = 1
    port: int = 8080
    health_path: str = "/healthz"
    # workspace only: the admin's workspace image it runs (its image, command and port
    # are filled in from it when the spec is checked)
    workspace_image: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored on the Job row and returned by the API (``asdict``'s, built
        without its recursive deep copy: every submit stores one)."""
        data = {name: getattr(self, name) for name in _SPEC_FIELDS}
        data["command"] = list(self.command)
        data["args"] = list(self.args)
        data["env"] = dict(self.env)
        data["gpu"] = {name: getattr(self.gpu, name) for name in _GPU_FIELDS}
        data["volumes"] = [
            {name: getattr(v, name) for name in _VOLUME_FIELDS} for v in self.volumes
        ]
        data["checkpoint"] = (
            None
            if self.checkpoint is None
            else {"claim": self.checkpoint.claim, "mount_path": self.checkpoint.mount_path}
        )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """Rebuild a spec from its JSON form (already validated)."""
        values = dict(data)
        values["gpu"] = GpuRequest(**(values.get("gpu") or {}))
        values["command"] = tuple(values.get("command") or ())
        values["args"] = tuple(values.get("args") or ())
        values["env"] = dict(values.get("env") or {})
        values["volumes"] = tuple(VolumeMount(**v) for v in values.get("volumes") or ())
        checkpoint = values.get("checkpoint")
        values["checkpoint"] = Checkpoint(**checkpoint) if checkpoint else None
        return cls(**values)

    @property
    def gpu_resource_count(self) -> int:
        """GPUs (or MIG slices, or shared GPUs) one pod requests."""
        return self.gpu.count

    @property
    def pod_count(self) -> int:
        if self.kind == "workspace":
            return 1
        return self.workers if self.kind == "training" else self.replicas


# The fields of one kind only: a spec of another kind that sends one is refused.
TRAINING_ONLY = ("launcher", "checkpoint", "workers", "max_runtime_seconds", "retries")
INFERENCE_ONLY = ("replicas", "port", "health_path")
WORKSPACE_ONLY = ("workspace_image",)
KIND_ONLY: dict[str, tuple[str, ...]] = {
    "training": TRAINING_ONLY,
    "inference": INFERENCE_ONLY,
    "workspace": WORKSPACE_ONLY,
}
# What a workspace takes from its workspace image, never from the client.
FROM_WORKSPACE_IMAGE = ("image", "command", "args", "port")


def fields_not_for(kind: str) -> dict[str, str]:
    """The fields a spec of ``kind`` may not send, each with the kind it belongs to (or
    ``workspace image`` for what a workspace's image decides)."""
    refused = {field: other for other, only in KIND_ONLY.items() if other != kind for field in only}
    if kind == "workspace":
        refused.update(dict.fromkeys(FROM_WORKSPACE_IMAGE, "workspace image"))
    return refused


_SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))
_GPU_FIELDS = tuple(f.name for f in fields(GpuRequest))
_VOLUME_FIELDS = tuple(f.name for f in fields(VolumeMount))


def spec_submittable(data: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as a client may send it again: without the other kind's fields (the
    stored form keeps every field, with its default) and without empty optional values.

    What the API returns as a job's ``spec``, so a GET'd spec can be POSTed back (clone)."""
    kind = data.get("kind")
    other = fields_not_for(kind) if kind else {}
    return {k: v for k, v in data.items() if k not in other and v is not None}


def spec_yaml(data: dict[str, Any]) -> str:
    """A stored spec as YAML, fields in the contract's order (the database keeps no order)."""
    ordered = {key: data[key] for key in _SPEC_FIELDS if key in data}
    if isinstance(ordered.get("gpu"), dict):
        ordered["gpu"] = {k: ordered["gpu"][k] for k in _GPU_FIELDS if k in ordered["gpu"]}
    return yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=1_000_000)
