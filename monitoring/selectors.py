"""Reads for the GPU dashboards: the cluster (through ``portal.kube``), the portal's own
job rows, and DCGM metrics (through ``monitoring.prometheus``).

Selectors that feed a page take ``tolerate_errors``: when true, an unreachable
Prometheus or cluster becomes an ``*_error`` text on the result (the page shows a
panel and the rest still renders); when false they raise (the API answers 503).
After the first Prometheus failure no further query is sent in the same request:
a Prometheus that hangs must not cost one timeout per panel.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet
from django.utils import timezone

from cluster.nodes import GpuNode, cluster_gpu_nodes
from core.errors import ClusterUnavailable
from jobs.models import Job, JobState
from jobs.selectors import QuotaUse, quota_usage
from monitoring import prometheus, queries
from monitoring.prometheus import MetricsUnavailable, Sample, Series
from scheduling.resources import CPU, MEMORY
from teams.models import Team
from teams.selectors import teams_for_user

PodKey = tuple[str, str]  # (namespace, pod)
MAX_LOOKBACK = timedelta(days=7)
MIN_JOB_WINDOW = timedelta(minutes=5)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    step: int  # seconds

    @classmethod
    def last(cls, seconds: float, *, now: datetime) -> Window:
        return cls.between(now - timedelta(seconds=seconds), now)

    @classmethod
    def between(cls, start: datetime, end: datetime) -> Window:
        span = max(1.0, (end - start).total_seconds())
        return cls(start, end, queries.step_for(span))

    def grid(self) -> list[float]:
        """The timestamps Prometheus evaluates a range query at: start, start+step, … ≤ end."""
        first, last = self.start.timestamp(), self.end.timestamp()
        count = int((last - first) // self.step) + 1
        return [first + i * self.step for i in range(count)]


def device_name(labels: dict[str, str]) -> str:
    """``node GPU 3`` (``· MIG 2`` for an instance, ``· pod`` when one holds it)."""
    name = f"{labels.get('node', '?')} GPU {labels.get('gpu', '?')}"
    if labels.get("GPU_I_ID"):
        name += f" MIG {labels['GPU_I_ID']}"
    if labels.get("pod"):
        name += f" · {labels['pod']}"
    return name


# --- Pods → jobs -----------------------------------------------------------------------


def _placement_pods(job: Job) -> list[str]:
    return [str(p["name"]) for p in (job.placement or {}).get("pods") or [] if p.get("name")]


def jobs_for_pods(*, pods: Iterable[PodKey], now: datetime | None = None) -> dict[PodKey, Job]:
    """The portal job each (namespace, pod) belongs to.

    1. Candidates: jobs in those namespaces that started and were not finished more
       than a week ago (older pods cannot hold a GPU now).
    2. A pod named in a job's ``placement`` belongs to that job; otherwise to the job
       whose object name prefixes the pod name (the longest such name: ``a-1-2-x`` is a
       pod of ``a-1-2``, not of ``a-1``).
    """
    wanted = set(pods)
    if not wanted:
        return {}
    now = now or timezone.now()
    candidates = list(
        Job.objects.filter(namespace__in={ns for ns, _ in wanted}, started_at__isnull=False)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=now - MAX_LOOKBACK))
        .select_related("team", "owner")
    )
    by_name: dict[PodKey, Job] = {}
    for job in candidates:
        for pod in _placement_pods(job):
            by_name[(job.namespace, pod)] = job
    prefixes = sorted(
        ((j.namespace, j.object_name + "-", j) for j in candidates if j.object_name),
        key=lambda item: -len(item[1]),
    )
    found: dict[PodKey, Job] = {}
    for key in wanted:
        namespace, pod = key
        holder = by_name.get(key) or next(
            (j for ns, p, j in prefixes if ns == namespace and pod.startswith(p)), None
        )
        if holder is not None:
            found[key] = holder
    return found


# --- Idle GPUs -------------------------------------------------------------------------


@dataclass(frozen=True)
class IdleJob:
    job: Job
    gpus_held: int
    peak_utilisation: float | None  # the highest utilisation in the window, percent
    wasted_gpu_hours: float  # GPU-hours held while under the threshold (≤ 7 days back)


@dataclass(frozen=True)
class IdleReport:
    threshold_percent: float
    window_minutes: float
    jobs: list[IdleJob]  # the ones the user may see
    idle_gpus_total: int  # every team's, as a count only


def _job_pod_keys(job: Job, idle: dict[PodKey, float | None]) -> list[PodKey]:
    pods = _placement_pods(job)
    if pods:
        return [(job.namespace, p) for p in pods]
    prefix = job.object_name + "-"
    return [k for k in idle if k[0] == job.namespace and k[1].startswith(prefix)]


def idle_report_get(
    *, user: User | AnonymousUser, teams: Iterable[Team] | None = None, now: datetime | None = None
) -> IdleReport:
    """Running jobs whose GPUs all stayed under ``IDLE_GPU_THRESHOLD_PERCENT`` for the last
    ``IDLE_GPU_WINDOW_MINUTES``, with the GPU-hours they held idle.

    1. Prometheus: the pods whose every GPU stayed under the threshold for the window.
       Only pods that held their GPUs a whole window ago count (Prometheus checks this
       from its own samples; a younger job has not been idle for the window yet).
    2. Database: running jobs with GPUs; a job is idle when every pod it placed is in (1).
    3. Prometheus: the idle GPU-seconds of those pods since the oldest of them started.
    4. The list is limited to ``teams`` (default: the user's); the total counts all.
    Raises ``MetricsUnavailable``.
    """
    now = now or timezone.now()
    threshold = float(settings.IDLE_GPU_THRESHOLD_PERCENT)
    window = timedelta(minutes=float(settings.IDLE_GPU_WINDOW_MINUTES))
    peaks = {
        (s.labels.get("namespace", ""), s.labels.get("pod", "")): s.value
        for s in prometheus.query(
            queries.idle_pods(threshold_percent=threshold, window_seconds=window.total_seconds()),
            at=now,
        )
    }
    running = Job.objects.filter(state=JobState.RUNNING, gpu_count__gt=0).select_related(
        "team", "owner"
    )
    idle: list[tuple[Job, list[PodKey]]] = []
    for job in running:
        keys = _job_pod_keys(job, peaks)
        if keys and all(k in peaks for k in keys):
            idle.append((job, keys))
    seconds: dict[PodKey, float] = {}
    if idle:
        # Series carry a pod only while it holds the GPU, so looking back further than the
        # job's life costs time but never counts another pod's samples.
        oldest = min((job.started_at or now) for job, _ in idle)
        lookback = min(
            max((now - oldest).total_seconds(), window.total_seconds()),
            MAX_LOOKBACK.total_seconds(),
        )
        step = queries.step_for(lookback)
        for s in prometheus.query(
            queries.idle_gpu_seconds(
                threshold_percent=threshold,
                lookback_seconds=lookback,
                step=step,
                recorded=settings.PROMETHEUS_RECORDING_RULES,
            ),
            at=now,
        ):
            seconds[(s.labels.get("namespace", ""), s.labels.get("pod", ""))] = s.value or 0.0
    visible = {t.pk for t in (teams if teams is not None else teams_for_user(user=user))}
    jobs = [
        IdleJob(
            job=job,
            gpus_held=job.gpu_count,
            peak_utilisation=max((peaks[k] or 0.0 for k in keys), default=None),
            wasted_gpu_hours=sum(seconds.get(k, 0.0) for k in keys) / 3600,
        )
        for job, keys in idle
        if job.team_id in visible
    ]
    jobs.sort(key=lambda i: (-i.wasted_gpu_hours, -i.gpus_held, i.job.pk))
    return IdleReport(
        threshold_percent=threshold,
        window_minutes=window.total_seconds() / 60,
        jobs=jobs,
        idle_gpus_total=sum(job.gpu_count for job, _ in idle),
    )


# --- Cluster overview ------------------------------------------------------------------


@dataclass(frozen=True)
class ProductCapacity:
    product: str
    nodes: int
    gpus_total: int
    gpus_allocated: int
    mig_total: int
    mig_allocated: int
    shared_total: int
    shared_allocated: int

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus_total - self.gpus_allocated)


def capacity_by_product(nodes: Iterable[GpuNode]) -> list[ProductCapacity]:
    """Whole GPUs, MIG slices and time-sliced replicas per GPU product."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0] * 7)
    for node in nodes:
        row = rows[node.gpu_product or "(no product label)"]
        row[0] += 1
        row[1] += node.gpus_allocatable
        row[2] += node.gpus_allocated
        row[3] += sum(m.allocatable for m in node.mig)
        row[4] += sum(m.allocated for m in node.mig)
        if node.shared is not None:
            row[5] += node.shared.allocatable
            row[6] += node.shared.allocated
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
    try:
        overview.products = capacity_by_product(cluster_gpu_nodes())
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
    except MetricsUnavailable as exc:
        if not tolerate_errors:
            raise
        overview.metrics_error = exc.message
    return overview


# --- Team usage ------------------------------------------------------------------------


@dataclass(frozen=True)
class JobGpuHours:
    job: Job
    gpu_hours: float


@dataclass
class TeamUsage:
    team: Team
    range_key: str
    window: Window
    quotas: list[QuotaUse]
    timestamps: list[float]
    allocated_gpus: list[float]  # GPUs (and slices) held by the team's running jobs
    quota_limits: dict[str, int]  # GPU quota resource → limit, for reference lines
    jobs_by_gpu_hours: list[JobGpuHours]
    gpu_hours_week: float
    gpu_hours_month: float
    utilisation: list[Series] = field(default_factory=list)  # mean %, the team's GPUs
    busy_gpus: list[Series] = field(default_factory=list)  # Σ utilisation / 100
    idle: IdleReport | None = None
    metrics_error: str | None = None


def team_for_user(*, user: User | AnonymousUser, slug: str) -> Team:
    """A team the user belongs to (platform admins: any); otherwise "not found"."""
    from core.errors import NotFound

    team = teams_for_user(user=user).filter(slug=slug).first()
    if team is None:
        raise NotFound("No such team.")
    return team


def _running_between(team: Team, start: datetime, end: datetime) -> QuerySet[Job]:
    """The team's jobs that held GPUs at some point in [start, end)."""
    return (
        Job.objects.filter(team=team, gpu_count__gt=0, started_at__isnull=False)
        .filter(started_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .select_related("owner", "team")
    )


def _held(job: Job, start: datetime, end: datetime, now: datetime) -> float:
    """GPU-hours the job held inside [start, end)."""
    assert job.started_at is not None
    job_end = job.finished_at or now
    overlap = (min(end, job_end) - max(start, job.started_at)).total_seconds()
    return job.gpu_count * max(0.0, overlap) / 3600


def allocation_series(jobs: Iterable[Job], grid: list[float], *, now: datetime) -> list[float]:
    """GPUs held at each grid timestamp: a job counts from ``started_at`` until
    ``finished_at`` (or now). Difference array: O(jobs + points)."""
    delta = [0.0] * (len(grid) + 1)
    for job in jobs:
        assert job.started_at is not None
        begin = bisect.bisect_left(grid, job.started_at.timestamp())
        # Still running: it holds its GPUs at every point up to now, the last one included.
        end = (
            len(grid)
            if job.finished_at is None
            else bisect.bisect_left(grid, job.finished_at.timestamp())
        )
        delta[begin] += job.gpu_count
        delta[end] -= job.gpu_count
    values, running = [], 0.0
    for d in delta[:-1]:
        running += d
        values.append(running)
    return values


def team_usage_get(
    *,
    team: Team,
    user: User | AnonymousUser,
    range_key: str,
    tolerate_errors: bool = True,
    now: datetime | None = None,
) -> TeamUsage:
    """Quota vs use now; GPUs held over the range (the portal's job rows) beside the
    measured utilisation of the team's GPUs (DCGM by namespace); GPU-hours by job, this
    week and this month; the team's idle jobs."""
    now = now or timezone.now()
    _, seconds = queries.parse_range(range_key)
    window = Window.last(seconds, now=now)
    grid = window.grid()
    in_range = list(_running_between(team, window.start, window.end))
    local = timezone.localtime(now)
    month_start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    week_start = (local - timedelta(days=local.weekday())).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    since = min(month_start, week_start)
    this_period = list(_running_between(team, since, now))
    ranked = sorted(
        (JobGpuHours(job, _held(job, window.start, window.end, now)) for job in in_range),
        key=lambda r: (-r.gpu_hours, r.job.pk),
    )
    quotas = quota_usage(team=team)
    usage = TeamUsage(
        team=team,
        range_key=range_key,
        window=window,
        quotas=quotas,
        timestamps=grid,
        allocated_gpus=allocation_series(in_range, grid, now=now),
        quota_limits={q.resource: q.limit for q in quotas if q.resource not in (CPU, MEMORY)},
        jobs_by_gpu_hours=ranked[:20],
        gpu_hours_week=sum(_held(j, week_start, now, now) for j in this_period),
        gpu_hours_month=sum(_held(j, month_start, now, now) for j in this_period),
    )
    try:
        usage.utilisation = prometheus.query_range(
            queries.team_utilisation(team.namespace, recorded=settings.PROMETHEUS_RECORDING_RULES),
            start=window.start,
            end=window.end,
            step=window.step,
        )
        usage.busy_gpus = prometheus.query_range(
            queries.team_busy_gpus(team.namespace, recorded=settings.PROMETHEUS_RECORDING_RULES),
            start=window.start,
            end=window.end,
            step=window.step,
        )
        usage.idle = idle_report_get(user=user, teams=[team], now=now)
    except MetricsUnavailable as exc:
        if not tolerate_errors:
            raise
        usage.metrics_error = exc.message
    return usage


# --- One job's GPUs --------------------------------------------------------------------


@dataclass
class JobGpus:
    job: Job
    window: Window | None  # None: the job has not started
    metrics: dict[str, list[Series]] = field(default_factory=dict)  # queries.JOB_METRICS keys
    notes: list[str] = field(default_factory=list)
    detail: str | None = None
    metrics_error: str | None = None


def job_gpus_get(
    *,
    job: Job,
    range_seconds: int | None = None,
    tolerate_errors: bool = True,
    now: datetime | None = None,
) -> JobGpus:
    """Utilisation, memory used, temperature and power of exactly the GPUs the job's pods
    hold, from ``started_at`` to ``finished_at`` (or now); ``range_seconds`` keeps only
    the last part of that lifetime. One line per (pod, device)."""
    now = now or timezone.now()
    if job.gpu_count == 0:
        return JobGpus(job, None, detail="This job requested no GPUs.")
    if job.started_at is None:
        return JobGpus(job, None, detail="No GPU data yet: the job has not started running.")
    # Clamped to now: a cluster clock ahead of ours (the sandbox runs faster than real
    # time) must not ask Prometheus for the future.
    end = min(job.finished_at or now, now)
    start = max(job.started_at, end - MAX_LOOKBACK)
    if range_seconds is not None:
        start = max(start, end - timedelta(seconds=range_seconds))
    # At least a few minutes on the axis: a job that started seconds ago still gets a chart
    # (its pods' series simply begin where it started).
    start = min(start, end - MIN_JOB_WINDOW)
    result = JobGpus(job, Window.between(start, end))
    sharing = ((job.spec or {}).get("gpu") or {}).get("sharing")
    if sharing == "shared":
        result.notes.append(
            "Time-sliced GPU: the pods sharing it report the same series, so this is the "
            "whole GPU's utilisation, not this job's share."
        )
    if sharing == "mig":
        result.notes.append(
            "MIG slice: utilisation is DCGM_FI_PROF_GR_ENGINE_ACTIVE (graphics engine "
            "activity of the slice), as DCGM reports no GPU_UTIL for MIG devices."
        )
    selector = queries.job_pods_selector(job.namespace, _placement_pods(job), job.object_name)
    window = result.window
    assert window is not None
    try:
        for key in queries.JOB_METRICS:
            result.metrics[key] = prometheus.query_range(
                queries.job_gpu_metric(key, selector),
                start=window.start,
                end=window.end,
                step=window.step,
            )
    except MetricsUnavailable as exc:
        if not tolerate_errors:
            raise
        result.metrics_error = exc.message
    return result
