"""One job's GPUs: the DCGM series of each device its pods hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from jobs.models import Job
from monitoring import prometheus, queries
from monitoring.prometheus import MetricsUnavailable, Series
from monitoring.selectors.common import (
    MAX_LOOKBACK,
    MIN_JOB_WINDOW,
    Window,
    placement_pods,
)


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
    selector = queries.job_pods_selector(job.namespace, placement_pods(job), job.object_name)
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
