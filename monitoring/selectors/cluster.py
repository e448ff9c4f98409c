"""The cluster overview: GPU capacity by product, per-GPU cells, alerts, the utilisation line."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Count
from django.utils import timezone

from cluster.nodes import GpuNode, cluster_gpu_nodes
from core.errors import ClusterUnavailable
from jobs.models import Job
from monitoring import prometheus, queries
from monitoring.models import NodeFailure
from monitoring.prometheus import MetricsUnavailable, Sample, Series
from monitoring.selectors.common import Window, jobs_for_pods
from monitoring.selectors.idle import IdleReport, idle_report_get
from monitoring.xid import xid_meaning
from teams.selectors import teams_for_user


@dataclass(frozen=True)
class ProductCapacity:
    product: str  # "Tesla-T4", or "Tesla-T4 (time-sliced)" for GFD's Tesla-T4-SHARED nodes
    nodes: int
    physical_gpus: int  # the GPUs in the machines, however they are offered
    gpus_total: int  # offered whole (nvidia.com/gpu)
    gpus_allocated: int
    mig_total: int
    mig_allocated: int
    shared_total: int
    shared_allocated: int

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus_total - self.gpus_allocated)


def _product_name(node: GpuNode) -> str:
    if not node.gpu_product:
        return "(no product label)"
    if node.gpu_product.endswith("-SHARED") or node.shared is not None:
        # Time-sliced GPUs (GFD adds -SHARED when they keep the plain resource name; with
        # renameByDefault they are nvidia.com/gpu.shared): a row of their own
        return f"{node.gpu_product.removesuffix('-SHARED')} (time-sliced)"
    return node.gpu_product


def capacity_by_product(nodes: Iterable[GpuNode]) -> list[ProductCapacity]:
    """Per GPU product: the physical GPUs, and what is offered of them as whole GPUs, MIG
    slices and time-sliced replicas (a time-sliced node's GPUs are a row of their own)."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0] * 8)
    for node in nodes:
        row = rows[_product_name(node)]
        row[0] += 1
        row[1] += node.physical_gpus
        row[2] += node.gpus_allocatable
        row[3] += node.gpus_allocated
        row[4] += sum(m.allocatable for m in node.mig)
        row[5] += sum(m.allocated for m in node.mig)
        if node.shared is not None:
            row[6] += node.shared.allocatable
            row[7] += node.shared.allocated
    return [ProductCapacity(product, *row) for product, row in sorted(rows.items())]


@dataclass(frozen=True)
class GpuCell:
    node: str
    gpu: str
    value: float | None


@dataclass(frozen=True)
class GpuAlert:
    name: str
    severity: str
    gpu: str
    node: str
    namespace: str
    pod: str
    value: float | None
    summary: str
    description: str
    active_at: str
    job: Job | None  # the holding job, when the user may see it


@dataclass(frozen=True)
class GpuHealth:
    """One GPU (or node) that needs a look: its last XID and ECC errors (DCGM), GPUs the
    device plugin took out of service and the node's readiness (the cluster)."""

    node: str
    gpu: str  # "" for a node-wide row
    xid: int | None
    xid_meaning: str
    ecc_dbe: int | None
    unhealthy_gpus: int
    ready: str
    failures_week: int = 0  # node rows: GPU failures that failed jobs, last 7 days
    cordoned: bool = False


@dataclass
class ClusterOverview:
    range_key: str
    window: Window
    products: list[ProductCapacity] = field(default_factory=list)
    cluster_error: str | None = None
    utilisation_cells: list[GpuCell] = field(default_factory=list)
    temperature_cells: list[GpuCell] = field(default_factory=list)
    utilisation: list[Series] = field(default_factory=list)
    alerts: list[GpuAlert] = field(default_factory=list)
    idle: IdleReport | None = None
    metrics_error: str | None = None
    gpu_health: list[GpuHealth] = field(default_factory=list)


def _cells(samples: list[Sample]) -> list[GpuCell]:
    return [GpuCell(s.labels.get("node", "?"), s.labels.get("gpu", "?"), s.value) for s in samples]


def gpu_alerts_get(*, user: User | AnonymousUser, now: datetime | None = None) -> list[GpuAlert]:
    """Firing alerts with the GPU, node and holding job (a job only when the user may see
    it; everyone sees the namespace/pod Prometheus reports). Raises ``MetricsUnavailable``."""
    firing = [a for a in prometheus.alerts() if a.state == "firing"]
    holders = jobs_for_pods(
        pods={
            (a.labels["namespace"], a.labels["pod"])
            for a in firing
            if a.labels.get("namespace") and a.labels.get("pod")
        },
        now=now,
    )
    visible = set(teams_for_user(user=user).values_list("pk", flat=True))
    result = []
    for a in firing:
        labels = a.labels
        job = holders.get((labels.get("namespace", ""), labels.get("pod", "")))
        result.append(
            GpuAlert(
                name=labels.get("alertname", ""),
                severity=labels.get("severity", ""),
                gpu=labels.get("gpu", ""),
                node=labels.get("node") or labels.get("Hostname") or labels.get("hostname", ""),
                namespace=labels.get("namespace", ""),
                pod=labels.get("pod", ""),
                value=a.value,
                summary=a.annotations.get("summary", ""),
                description=a.annotations.get("description", ""),
                active_at=a.active_at,
                job=job if job is not None and job.team_id in visible else None,
            )
        )
    order = {"critical": 0, "warning": 1, "info": 2}
    result.sort(key=lambda x: (order.get(x.severity, 3), x.node, x.gpu, x.pod))
    return result


def cluster_overview_get(
    *,
    user: User | AnonymousUser,
    range_key: str,
    tolerate_errors: bool = True,
    now: datetime | None = None,
) -> ClusterOverview:
    """Capacity by product (cluster), per-GPU utilisation/temperature, cluster utilisation
    over the range, firing alerts and idle GPUs (Prometheus)."""
    now = now or timezone.now()
    _, seconds = queries.parse_range(range_key)
    overview = ClusterOverview(range_key=range_key, window=Window.last(seconds, now=now))
    nodes: list[GpuNode] = []
    try:
        nodes = cluster_gpu_nodes()
        overview.products = capacity_by_product(nodes)
    except ClusterUnavailable as exc:
        if not tolerate_errors:
            raise
        overview.cluster_error = exc.message
    try:
        overview.utilisation_cells = _cells(
            prometheus.query(queries.cluster_utilisation_by_gpu(), at=now)
        )
        overview.temperature_cells = _cells(
            prometheus.query(queries.cluster_temperature_by_gpu(), at=now)
        )
        w = overview.window
        overview.utilisation = prometheus.query_range(
            queries.cluster_utilisation(recorded=settings.PROMETHEUS_RECORDING_RULES),
            start=w.start,
            end=w.end,
            step=w.step,
        )
        overview.alerts = gpu_alerts_get(user=user, now=now)
        overview.idle = idle_report_get(user=user, now=now)
        xids = _by_gpu(prometheus.query(queries.gpu_xid_now(), at=now))
        eccs = _by_gpu(prometheus.query(queries.gpu_ecc_dbe_now(), at=now))
    except MetricsUnavailable as exc:
        if not tolerate_errors:
            raise
        overview.metrics_error = exc.message
        xids, eccs = {}, {}
    week = NodeFailure.objects.filter(at__gte=now - timedelta(days=7))
    failures = dict(week.values_list("node").annotate(n=Count("id")).values_list("node", "n"))
    overview.gpu_health = gpu_health_rows(nodes, xids, eccs, failures)
    return overview


def _by_gpu(samples: list[Sample]) -> dict[tuple[str, str], int]:
    return {
        (s.labels.get("node", "?"), s.labels.get("gpu", "?")): int(s.value or 0) for s in samples
    }


def gpu_health_rows(
    nodes: Iterable[GpuNode],
    xids: dict[tuple[str, str], int],
    eccs: dict[tuple[str, str], int],
    failures: dict[str, int] | None = None,
) -> list[GpuHealth]:
    """A row per GPU with an XID or ECC errors, and per node with GPUs out of service, not
    Ready, cordoned, or with GPU failures this week; a node's own row before its GPUs'."""
    failures = failures or {}
    rows: list[GpuHealth] = []
    by_node = {node.name: node for node in nodes}
    for node in by_node.values():
        failed = failures.get(node.name, 0)
        if node.unhealthy_gpus or node.ready != "True" or node.unschedulable or failed:
            rows.append(
                GpuHealth(
                    node.name,
                    "",
                    None,
                    "",
                    None,
                    node.unhealthy_gpus,
                    node.ready,
                    failed,
                    node.unschedulable,
                )
            )
    for key in sorted(set(xids) | set(eccs)):
        node_name, gpu = key
        xid = xids.get(key)
        holder = by_node.get(node_name)
        rows.append(
            GpuHealth(
                node_name,
                gpu,
                xid,
                xid_meaning(xid) if xid else "",
                eccs.get(key),
                0,
                holder.ready if holder else "?",
            )
        )
    return sorted(rows, key=lambda r: (r.node, r.gpu != "", len(r.gpu), r.gpu))
