"""Advice from demand: when jobs wait for MIG slices the cluster lacks while MIG-capable
nodes hold whole GPUs idle, propose re-partitioning one of them with a layout of the MIG
manager's config, with its effect (docs/gpu-operator.md#advice).

Advice only: the admin applies it through the change flow (its preview is one click away).

1. Demand: the jobs waiting (queued, or admitted with pods the scheduler cannot place) that
   ask for ``nvidia.com/mig-<profile>``: how many, how many slices, how long they waited.
2. Supply: MIG-capable nodes offering whole GPUs, schedulable, with no change under way,
   whose whole GPUs all stayed idle (the portal's threshold, ``idleness.nodes_gpu_use``)
   over ``GPU_ADVICE_WINDOW_MINUTES``. Without Prometheus there is no advice: idle cannot be
   told.
3. For each demanded profile, most waited first: the idlest node left and the layout
   ``all-<profile>`` if its product can take it (else any layout of the config offering the
   profile), with the slices it gains and the whole GPUs it loses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Q

from cluster.gpu_operator_state import GpuOperator, OperatorNode
from jobs.models import Job, JobState
from monitoring import prometheus
from monitoring.idleness import NodeGpuUse, nodes_gpu_use
from scheduling.gpu_operator_config import (
    base_product,
    gpu_layouts,
    layout_problem,
    layout_resources,
)
from scheduling.resources import GPU_COUNT_LABEL, MIG_PREFIX


@dataclass(frozen=True)
class Demand:
    resource: str
    jobs: int
    units: int
    waited_hours: float

    @property
    def profile(self) -> str:
        return self.resource.removeprefix(MIG_PREFIX)


@dataclass(frozen=True)
class GpuAdvice:
    demand: Demand
    node: str
    whole_gpus: int
    mean_percent: float
    window_seconds: float
    layout: str
    gained: int  # slices of the demanded profile
    lost: int  # whole GPUs

    @property
    def clears(self) -> bool:
        return self.gained >= self.demand.units

    @property
    def words(self) -> str:
        d = self.demand
        jobs = f"{d.jobs} job{'s' if d.jobs != 1 else ''}"
        effect = (
            f"the queue for {d.profile} clears"
            if self.clears
            else f"{self.gained} of the {d.units} slices asked for"
        )
        return (
            f"{jobs} ({d.waited_hours:.1f} h waited in total) need {d.resource}; {self.node} "
            f"has {self.whole_gpus} whole GPU{'s' if self.whole_gpus != 1 else ''} at "
            f"{self.mean_percent:.0f} % use for {_span(self.window_seconds)}: re-partition it as "
            f"{self.layout} → +{self.gained} {d.profile} slices, −{self.lost} whole GPUs; "
            f"{effect}."
        )


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def mig_demand(*, now: datetime) -> list[Demand]:
    """What waiting jobs ask for of each MIG profile, most waited first."""
    waiting = Job.objects.filter(
        Q(state=JobState.QUEUED, admitted_at__isnull=True) | Q(state=JobState.PENDING)
    ).only("demand", "created_at")
    found: dict[str, tuple[int, int, float]] = {}
    for job in waiting:
        waited = max(0.0, (now - job.created_at).total_seconds() / 3600)
        for resource, amount in (job.demand or {}).items():
            if resource.startswith(MIG_PREFIX) and int(amount) > 0:
                jobs, units, hours = found.get(resource, (0, 0, 0.0))
                found[resource] = (jobs + 1, units + int(amount), hours + waited)
    demands = [Demand(r, j, u, h) for r, (j, u, h) in found.items()]
    return sorted(demands, key=lambda d: (-d.waited_hours, d.resource))


def gpu_advice(
    *, operator: GpuOperator, nodes: list[OperatorNode], now: datetime
) -> tuple[list[GpuAdvice], str]:
    """The advice, and why there is none when Prometheus cannot say what is idle."""
    demands = mig_demand(now=now)
    if not demands or not operator.mig_layouts:
        return [], ""
    window = float(settings.GPU_ADVICE_WINDOW_MINUTES) * 60
    try:
        use = nodes_gpu_use(window_seconds=window)
    except prometheus.MetricsUnavailable as exc:
        return [], f"No advice: GPU use cannot be read ({exc.message})."
    candidates = [
        (entry, use[entry.node.name])
        for entry in nodes
        if entry.operator.mig_capable
        and entry.node.gpus_allocatable > 0
        and not entry.node.unschedulable
        and entry.change is None
        and entry.node.name in use
        and use[entry.node.name].idle
    ]
    candidates.sort(key=lambda c: (c[1].mean_percent, c[0].node.name))
    advice: list[GpuAdvice] = []
    taken: set[str] = set()
    for demand in demands:
        for entry, node_use in candidates:
            if entry.node.name in taken:
                continue
            found = _layout_for(operator, entry, demand.profile)
            if found is None:
                continue
            layout, gained = found
            advice.append(_advice(demand, entry, node_use, window, layout, gained))
            taken.add(entry.node.name)
            break
    return advice, ""


def _advice(
    demand: Demand,
    entry: OperatorNode,
    use: NodeGpuUse,
    window: float,
    layout: str,
    gained: int,
) -> GpuAdvice:
    return GpuAdvice(
        demand=demand,
        node=entry.node.name,
        whole_gpus=entry.node.gpus_allocatable,
        mean_percent=use.mean_percent,
        window_seconds=window,
        layout=layout,
        gained=gained,
        lost=entry.node.gpus_allocatable,
    )


def _layout_for(operator: GpuOperator, entry: OperatorNode, profile: str) -> tuple[str, int] | None:
    """``all-<profile>`` if the node's product takes it, else the layout of the config
    that offers the most of ``profile`` on it; with the slices it makes."""
    product = base_product(entry.node.gpu_product)
    try:
        count = int(entry.node.labels.get(GPU_COUNT_LABEL, "0"))
    except ValueError:
        return None
    best: tuple[int, str] | None = None
    for name, entries in operator.mig_layouts.items():
        if layout_problem(name, entries, product, count):
            continue
        made = layout_resources(gpu_layouts(entries, product, count)).get(MIG_PREFIX + profile, 0)
        if not made:
            continue
        rank = (1 if name == f"all-{profile}" else 0, made)
        if best is None or rank > (1 if best[1] == f"all-{profile}" else 0, best[0]):
            best = (made, name)
    return None if best is None else (best[1], best[0])
