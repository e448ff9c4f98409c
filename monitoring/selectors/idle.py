"""Idle GPUs: jobs holding GPUs whose utilisation stayed under the threshold."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from jobs.models import Job, JobState
from monitoring import prometheus, queries
from monitoring.selectors.common import MAX_LOOKBACK, PodKey, placement_pods
from teams.models import Team
from teams.selectors import teams_for_user


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
    pods = placement_pods(job)
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
