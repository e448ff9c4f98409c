"""Reads from the cluster itself: its snapshot (nodes and the pods bound to them), GPU nodes
and what is allocated on them.

Quantities are parsed by the scheduling core (``node_from_k8s``/``pod_from_k8s``),
so the portal counts GPUs exactly as kube-scheduler does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from cluster import kube
from cluster.priority_classes import PRIORITY_CLASSES
from core.errors import ClusterUnavailable
from scheduling import ClusterSnapshot, node_from_k8s, pod_from_k8s, pod_is_terminal
from scheduling.resources import (
    ANY_GPU,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    MIG_PREFIX,
    SHARED_GPU,
    is_gpu_resource,
)

_UNREACHABLE_PREFIX = "cluster unreachable: "


def cluster_error_text(exc: kube.ClusterError) -> str:
    """``cluster unreachable: <what the adapter said>``, said once."""
    message = exc.message
    if message.lower().startswith(_UNREACHABLE_PREFIX):
        message = message[len(_UNREACHABLE_PREFIX) :]
    return f"{_UNREACHABLE_PREFIX}{message}"


@dataclass(frozen=True)
class ResourceUse:
    resource: str
    allocatable: int
    allocated: int


@dataclass(frozen=True)
class NodeTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class GpuNode:
    name: str
    gpu_product: str
    gpus_allocatable: int  # nvidia.com/gpu (whole GPUs)
    gpus_allocated: int
    # The GPUs in the machine (GFD's nvidia.com/gpu.count), however they are offered: whole,
    # as MIG instances, or as time-sliced replicas
    physical_gpus: int
    mig: list[ResourceUse]  # one per nvidia.com/mig-<profile> the node offers
    shared: ResourceUse | None  # nvidia.com/gpu.shared (time-slicing), when offered
    taints: list[NodeTaint]
    unschedulable: bool
    # What the device plugin took out of service: GPU resources in capacity, not allocatable.
    unhealthy_gpus: int = 0
    ready: str = "True"  # the node's Ready condition: True, False or Unknown
    labels: dict[str, str] = field(default_factory=dict, compare=False)


def cluster_snapshot() -> ClusterSnapshot:
    """Nodes and the pods bound to them (not Succeeded or Failed), now, as the scheduling
    core places pods on them. Raises ``kube.ClusterError``."""
    return _snapshot_of(list(kube.list_all("Node")))


def _snapshot_of(node_objects: list[dict[str, Any]]) -> ClusterSnapshot:
    bound = [
        pod_from_k8s(obj, PRIORITY_CLASSES)
        for obj in kube.list_all("Pod")
        if (obj.get("spec") or {}).get("nodeName") and not pod_is_terminal(obj)
    ]
    return ClusterSnapshot([node_from_k8s(obj) for obj in node_objects], bound)


def cluster_gpu_nodes() -> list[GpuNode]:
    """Every node offering GPUs (whole, MIG or shared), with what bound pods request.

    1. LIST the nodes; keep those with a GPU resource in allocatable or a GPU product label.
    2. LIST every pod; sum the requests of bound pods that are not Succeeded/Failed
       (kube-scheduler's view of what a node has handed out).
    Raises ``ClusterUnavailable`` (503) when the cluster cannot be read.
    """
    try:
        raw = list(kube.list_all("Node"))
        snapshot = _snapshot_of(raw)
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc
    nodes = snapshot.nodes
    allocated: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in snapshot.pods:
        assert pod.node_name is not None
        for resource, amount in pod.requests.items():
            if is_gpu_resource(resource):
                allocated[pod.node_name][resource] += amount
    health = {(obj.get("metadata") or {}).get("name", ""): _health(obj) for obj in raw}
    result = []
    for node in sorted(nodes, key=lambda n: n.name):
        gpu_resources = {r: q for r, q in node.allocatable.items() if is_gpu_resource(r) and q}
        if not gpu_resources and GPU_PRODUCT_LABEL not in node.labels:
            continue
        used = allocated.get(node.name, {})
        result.append(
            GpuNode(
                name=node.name,
                gpu_product=node.labels.get(GPU_PRODUCT_LABEL, ""),
                gpus_allocatable=node.allocatable.get(ANY_GPU, 0),
                gpus_allocated=used.get(ANY_GPU, 0),
                physical_gpus=_physical_gpus(node.labels, node.allocatable.get(ANY_GPU, 0)),
                mig=[
                    ResourceUse(resource, amount, used.get(resource, 0))
                    for resource, amount in sorted(gpu_resources.items())
                    if resource.startswith(MIG_PREFIX)
                ],
                shared=(
                    ResourceUse(SHARED_GPU, gpu_resources[SHARED_GPU], used.get(SHARED_GPU, 0))
                    if SHARED_GPU in gpu_resources
                    else None
                ),
                taints=[NodeTaint(t.key, t.value, t.effect) for t in node.taints],
                unschedulable=node.unschedulable,
                unhealthy_gpus=health[node.name][0],
                ready=health[node.name][1],
                labels=dict(node.labels),
            )
        )
    return result


def _health(obj: dict[str, Any]) -> tuple[int, str]:
    """(GPU resources in capacity but not allocatable, the Ready condition's status)."""
    status = obj.get("status") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    unhealthy = 0
    for resource, amount in capacity.items():
        if is_gpu_resource(resource):
            try:
                unhealthy += max(0, int(amount) - int(allocatable.get(resource, 0)))
            except (TypeError, ValueError):
                continue
    ready = next(
        (
            c.get("status", "Unknown")
            for c in status.get("conditions") or []
            if c.get("type") == "Ready"
        ),
        "Unknown",
    )
    return unhealthy, str(ready)


def _physical_gpus(labels: dict[str, str], whole: int) -> int:
    try:
        return int(labels.get(GPU_COUNT_LABEL, whole))
    except ValueError:
        return whole
