"""Small builders so each test states only what matters to it."""

from __future__ import annotations

from typing import Any

from scheduling import Node, Pod, Taint

GIB = 2**30
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def node(
    name: str,
    *,
    gpus: int = 8,
    product: str | None = A100,
    cpu: int = 64_000,
    memory: int = 512 * GIB,
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    unschedulable: bool = False,
    extra: dict[str, int] | None = None,
) -> Node:
    all_labels = {"kubernetes.io/hostname": name}
    if product is not None:
        all_labels["nvidia.com/gpu.product"] = product
    all_labels.update(labels or {})
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpus:
        allocatable["nvidia.com/gpu"] = gpus
    allocatable.update(extra or {})
    return Node(
        name=name,
        labels=all_labels,
        taints=taints,
        allocatable=allocatable,
        unschedulable=unschedulable,
    )


def pod(name: str = "job", *, gpus: int = 0, on: str | None = None, **kwargs: Any) -> Pod:
    requests = dict(kwargs.pop("requests", {}))
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    return Pod(name=name, requests=requests, node_name=on, **kwargs)
