"""A team's GPU usage: quota beside what its jobs hold and use, and GPU-hours per job."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet
from django.utils import timezone

from jobs.models import Job
from jobs.selectors.jobs import QuotaUse, quota_usage
from monitoring import prometheus, queries
from monitoring.prometheus import MetricsUnavailable, Series
from monitoring.selectors.common import Window
from monitoring.selectors.idle import IdleReport, idle_report_get
from scheduling.resources import CPU, MEMORY
from teams.models import Team


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
    # GPU quota resource → what the team's jobs held of it at each point: compared with
    # that resource's own quota line (a MIG slice is not a whole GPU)
    allocated_by_resource: dict[str, list[float]]
    jobs_by_gpu_hours: list[JobGpuHours]
    gpu_hours_week: float
    gpu_hours_month: float
    utilisation: list[Series] = field(default_factory=list)  # mean %, the team's GPUs
    busy_gpus: list[Series] = field(default_factory=list)  # Σ utilisation / 100
    idle: IdleReport | None = None
    metrics_error: str | None = None


def team_jobs_between(team: Team, start: datetime, end: datetime) -> QuerySet[Job]:
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


def allocation_series(
    jobs: Iterable[Job],
    grid: list[float],
    *,
    now: datetime,
    resource: str | None = None,
) -> list[float]:
    """GPUs held at each grid timestamp: a job counts from ``started_at`` until
    ``finished_at`` (or now). With ``resource``, what the jobs held of that quota resource
    (their demand), instead of every GPU and slice. Difference array: O(jobs + points)."""
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
        held = job.gpu_count if resource is None else int(job.demand.get(resource, 0))
        delta[begin] += held
        delta[end] -= held
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
    in_range = list(team_jobs_between(team, window.start, window.end))
    local = timezone.localtime(now)
    month_start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    week_start = (local - timedelta(days=local.weekday())).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    since = min(month_start, week_start)
    this_period = list(team_jobs_between(team, since, now))
    ranked = sorted(
        (JobGpuHours(job, _held(job, window.start, window.end, now)) for job in in_range),
        key=lambda r: (-r.gpu_hours, r.job.pk),
    )
    quotas = quota_usage(team=team)
    gpu_quotas = {q.resource: q.limit for q in quotas if q.resource not in (CPU, MEMORY)}
    usage = TeamUsage(
        team=team,
        range_key=range_key,
        window=window,
        quotas=quotas,
        timestamps=grid,
        allocated_gpus=allocation_series(in_range, grid, now=now),
        quota_limits=gpu_quotas,
        allocated_by_resource={
            resource: allocation_series(in_range, grid, now=now, resource=resource)
            for resource in gpu_quotas
        },
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
