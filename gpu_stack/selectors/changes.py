"""What a change of a node's GPU shape would do, before it is made: the capacity each GPU
resource gains or loses and the portal's jobs it would move.

Capacity comes from the node (``status.capacity``) and the MIG manager's config: the GPUs
a layout touches lose what they offer now (their current layout, read from the config the
node's ``nvidia.com/mig.config`` names) and offer what the new layout makes of them,
advertised as the node's device plugin config says (time-slicing replicas, rename).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cluster import kube
from cluster.gpu_operator_state import GpuOperator, gpu_operator
from cluster.labels import JOB_ID_LABEL
from cluster.nodes import cluster_error_text
from core.errors import ApplicationError, ClusterUnavailable, NotFound
from jobs.models import ACTIVE_STATES, Job
from scheduling import pod_is_terminal, pod_requests
from scheduling.gpu_operator_config import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    GpuLayout,
    TimeSlicing,
    base_product,
    gpu_layouts,
    layout_problem,
    layout_resources,
)
from scheduling.resources import (
    ANY_GPU,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    SHARED_GPU,
    is_gpu_resource,
)


@dataclass(frozen=True)
class CapacityChange:
    resource: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass(frozen=True)
class MovedJob:
    id: int
    name: str
    team: str
    owner: str
    gpus: dict[str, int]


@dataclass(frozen=True)
class MigPreview:
    """A MIG layout change on one node: refused (``problem``) or its effect."""

    node: str
    product: str
    old_layout: str
    new_layout: str
    problem: str = ""
    capacity: list[CapacityChange] = field(default_factory=list)
    jobs: list[MovedJob] = field(default_factory=list)
    other_pods: list[str] = field(default_factory=list)  # GPU pods the portal did not start


def node_get(name: str) -> dict[str, Any]:
    """The node, or ``NotFound`` naming it; ``ClusterUnavailable`` when the cluster does not
    answer."""
    try:
        return kube.get("Node", name)
    except kube.ObjectNotFound as exc:
        raise NotFound(f"node: no node named {name}") from exc
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc


def node_sharing(operator: GpuOperator, node: dict[str, Any]) -> TimeSlicing:
    """The device plugin config a node runs: its label's, else the ClusterPolicy's default."""
    label = (node["metadata"].get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL, "")
    name = operator.policy.plugin_config_for(label)
    return operator.plugin_configs.get(name) or TimeSlicing({})


def mig_layouts_for(operator: GpuOperator, node: dict[str, Any]) -> dict[str, str]:
    """Every layout of the MIG manager's config, with why it cannot be applied to this
    node's GPUs ("" when it can)."""
    labels = node["metadata"].get("labels") or {}
    product, count = labels.get(GPU_PRODUCT_LABEL, ""), _int(labels.get(GPU_COUNT_LABEL))
    return {
        name: layout_problem(name, entries, product, count) or ""
        for name, entries in operator.mig_layouts.items()
    }


def mig_preview(*, node: str, layout: str) -> MigPreview:
    """What re-partitioning ``node`` as ``layout`` does. Raises ``NotFound`` for an unknown
    node, ``ClusterUnavailable`` when the cluster cannot be read."""
    try:
        obj = node_get(node)
        operator = gpu_operator()
        pods = list(kube.list_all("Pod", field_selector=f"spec.nodeName={node}"))
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc
    labels = obj["metadata"].get("labels") or {}
    product = base_product(labels.get(GPU_PRODUCT_LABEL, ""))
    current = labels.get(MIG_CONFIG_LABEL, "")
    preview = MigPreview(node=node, product=product, old_layout=current, new_layout=layout)
    problem = _refusal(operator, obj, layout)
    if problem:
        return MigPreview(**{**preview.__dict__, "problem": problem})
    count = _int(labels.get(GPU_COUNT_LABEL))
    target = gpu_layouts(operator.mig_layouts[layout], product, count)
    before_layouts: dict[int, GpuLayout] = dict.fromkeys(target)
    if current in operator.mig_layouts:
        known = gpu_layouts(operator.mig_layouts[current], product, count)
        before_layouts.update({i: known[i] for i in target if i in known})
    sharing = node_sharing(operator, obj)
    capacity = {
        r: _int(q)
        for r, q in ((obj.get("status") or {}).get("capacity") or {}).items()
        if is_gpu_resource(r)
    }
    after = dict(capacity)
    for resource, amount in layout_resources(before_layouts, sharing).items():
        after[resource] = max(0, after.get(resource, 0) - amount)
    for resource, amount in layout_resources(target, sharing).items():
        after[resource] = after.get(resource, 0) + amount
    changes = [
        CapacityChange(r, capacity.get(r, 0), after.get(r, 0))
        for r in sorted(set(capacity) | set(after))
        if capacity.get(r, 0) or after.get(r, 0)
    ]
    jobs, others = gpu_holders(pods)
    return MigPreview(
        **{**preview.__dict__, "capacity": changes, "jobs": jobs, "other_pods": others}
    )


def _refusal(operator: GpuOperator, node: dict[str, Any], layout: str) -> str:
    """Why ``layout`` cannot be applied to ``node`` (naming it), or ""."""
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    if not operator.policy.installed:
        return (
            "the cluster runs no NVIDIA GPU Operator (no ClusterPolicy): MIG layouts are set by it"
        )
    if operator.mig_layouts_error:
        return f"the MIG manager's config cannot be read: {operator.mig_layouts_error}"
    if labels.get("nvidia.com/mig.capable") != "true":
        product = labels.get(GPU_PRODUCT_LABEL, "its GPUs")
        return f"layout {layout}: node {name} ({product}) is not MIG-capable"
    if layout not in operator.mig_layouts:
        offered = ", ".join(sorted(operator.mig_layouts))
        return f"layout {layout}: the MIG manager's config has no such layout (it has {offered})"
    problem = layout_problem(
        layout,
        operator.mig_layouts[layout],
        labels.get(GPU_PRODUCT_LABEL, ""),
        _int(labels.get(GPU_COUNT_LABEL)),
    )
    if problem:
        return f"{problem}; node {name} cannot take it"
    if labels.get(MIG_CONFIG_LABEL) == layout and labels.get("nvidia.com/mig.config.state") in (
        "success",
        "pending",
    ):
        return f"layout {layout}: node {name} already has it"
    return ""


def gpu_holders(pods: list[dict[str, Any]]) -> tuple[list[MovedJob], list[str]]:
    """The portal's jobs with GPU pods among ``pods`` (not finished), and the other GPU
    pods (``namespace/name``) the portal cannot move."""
    held: dict[int, dict[str, int]] = {}
    others: list[str] = []
    for pod in pods:
        if pod_is_terminal(pod):
            continue
        requests = {
            r: q for r, q in pod_requests(pod.get("spec") or {}).items() if is_gpu_resource(r)
        }
        if not requests:
            continue
        meta = pod["metadata"]
        job_id = (meta.get("labels") or {}).get(JOB_ID_LABEL, "")
        if not job_id.isdigit():
            others.append(f"{meta.get('namespace')}/{meta['name']}")
            continue
        gpus = held.setdefault(int(job_id), {})
        for resource, amount in requests.items():
            gpus[resource] = gpus.get(resource, 0) + amount
    rows = Job.objects.filter(pk__in=held, state__in=ACTIVE_STATES).select_related("team", "owner")
    jobs = [
        MovedJob(j.pk, j.name, j.team.slug, j.owner.get_username(), held[j.pk])
        for j in rows.order_by("pk")
    ]
    return jobs, sorted(others)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def preview_or_raise(preview: MigPreview) -> MigPreview:
    if preview.problem:
        raise ApplicationError(preview.problem, field_errors={"layout": [preview.problem]})
    return preview


@dataclass(frozen=True)
class SharingPreview:
    """A device plugin config on one node: what it offers after, and whether running pods
    would be stranded (more pods on a GPU than the new replica count)."""

    node: str
    config: str
    before: dict[str, int]
    after: dict[str, int]
    held: int  # whole or time-sliced GPU units held by running pods
    problem: str = ""


def sharing_preview(*, node: str, config: str, sharing: TimeSlicing) -> SharingPreview:
    """What running device plugin config ``config`` (``sharing``) does to ``node``. The
    pods' spread over the node's GPUs is not in the API (only the kubelet knows it): the
    device plugin spreads replicas least-shared first, so a GPU holds at most
    ⌈held / GPUs⌉ of them, and that is what is checked."""
    try:
        obj = node_get(node)
        pods = list(kube.list_all("Pod", field_selector=f"spec.nodeName={node}"))
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc
    labels = obj["metadata"].get("labels") or {}
    capacity = {
        r: _int(q)
        for r, q in ((obj.get("status") or {}).get("capacity") or {}).items()
        if r in (ANY_GPU, SHARED_GPU)
    }
    replicas_now = max(1, _int(labels.get(GPU_REPLICAS_LABEL)) or 1)
    gpus = sum(capacity.values()) // replicas_now
    name, replicas = sharing.offered(ANY_GPU)
    after = {name: gpus * replicas} if gpus else {}
    held = 0
    holders: list[str] = []
    for pod in pods:
        if pod_is_terminal(pod):
            continue
        units = sum(
            q for r, q in pod_requests(pod.get("spec") or {}).items() if r in (ANY_GPU, SHARED_GPU)
        )
        if units:
            held += units
            holders.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
    problem = ""
    per_gpu = -(-held // gpus) if gpus else 0
    if held and per_gpu > replicas:
        problem = (
            f"node {node}: {held} running pod{'s' if held != 1 else ''} hold its {gpus} GPUs "
            f"(up to {per_gpu} on a GPU); {config} offers {replicas} per GPU, which would strand "
            f"{'them' if held != 1 else 'it'}. Move {', '.join(sorted(holders))} first."
        )
    elif held and set(after) != {r for r, q in capacity.items() if q}:
        problem = (
            f"node {node}: {config} advertises {name} instead of "
            f"{', '.join(sorted(r for r, q in capacity.items() if q))}, which {held} running "
            f"pod{'s' if held != 1 else ''} asked for. Move {', '.join(sorted(holders))} first."
        )
    return SharingPreview(node, config, capacity, after, held, problem)
