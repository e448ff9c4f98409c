"""Idle GPUs: jobs holding GPUs whose utilisation stayed under their team's threshold."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from jobs.models import Job, JobState
from monitoring import queries
from monitoring.idleness import IdleRule, idle_gpu_seconds, jobs_idleness, portal_idle_rule
from monitoring.selectors.common import MAX_LOOKBACK, PodKey
from teams.models import Team
from teams.selectors import teams_for_user


@dataclass(frozen=True)
class IdleJob:
    job: Job
    gpus_held: int
    peak_utilisation: float | None  # the highest utilisation in the window, percent
    wasted_gpu_hours: float  # GPU-hours held while under the threshold (≤ 7 days back)
    rule: IdleRule  # its team's threshold and window


@dataclass(frozen=True)
class IdleReport:
    threshold_percent: float  # the portal's rule; a team may set its own (IdleJob.rule)
    window_minutes: float
    jobs: list[IdleJob]  # the ones the user may see
    idle_gpus_total: int  # every team's, as a count only


def idle_report_get(
    *, user: User | AnonymousUser, teams: Iterable[Team] | None = None, now: datetime | None = None
) -> IdleReport:
    """Running jobs that are idle by their team's rule (``monitoring.idleness``), with the
    GPU-hours they held idle.

    1. Every running job with GPUs, against its team's rule (``jobs_idleness``).
    2. Prometheus: the idle GPU-seconds of the idle jobs' pods since the oldest of them
       started, each under its team's threshold.
    3. The list is limited to ``teams`` (default: the user's); the total counts all.
    Raises ``MetricsUnavailable``.
    """
    now = now or timezone.now()
    running = Job.objects.filter(state=JobState.RUNNING, gpu_count__gt=0).select_related(
        "team", "owner"
    )
    idle = [found for found in jobs_idleness(jobs=running, now=now) if found.idle]
    seconds: dict[PodKey, float] = {}
    if idle:
        # Series carry a pod only while it holds the GPU, so looking back further than the
        # job's life costs time but never counts another pod's samples.
        oldest = min((found.job.started_at or now) for found in idle)
        longest = max(found.rule.window_seconds for found in idle)
        lookback = min(max((now - oldest).total_seconds(), longest), MAX_LOOKBACK.total_seconds())
        seconds = idle_gpu_seconds(
            teams={found.job.team for found in idle},
            lookback_seconds=lookback,
            step=queries.step_for(lookback),
            at=now,
        )
    visible = {t.pk for t in (teams if teams is not None else teams_for_user(user=user))}
    jobs = [
        IdleJob(
            job=found.job,
            gpus_held=found.job.gpu_count,
            peak_utilisation=found.peak,
            wasted_gpu_hours=sum(seconds.get(pod, 0.0) for pod in found.pods) / 3600,
            rule=found.rule,
        )
        for found in idle
        if found.job.team_id in visible
    ]
    jobs.sort(key=lambda i: (-i.wasted_gpu_hours, -i.gpus_held, i.job.pk))
    portal = portal_idle_rule()
    return IdleReport(
        threshold_percent=portal.threshold_percent,
        window_minutes=portal.window_minutes,
        jobs=jobs,
        idle_gpus_total=sum(found.job.gpu_count for found in idle),
    )
