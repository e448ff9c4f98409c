"""Writes of the monitoring layer: acting on what the metrics show."""

from __future__ import annotations

import logging
from datetime import datetime

from django.contrib.auth.models import AnonymousUser

from jobs.timeline import timeline_add
from monitoring.selectors.idle import idle_report_get
from teams.models import Team

logger = logging.getLogger(__name__)


def idle_gpus_record(*, now: datetime | None = None) -> list[int]:
    """Put the idle-GPU detector's finding on each idle job's timeline, once per run of the
    job, which notifies its owner (event ``job.idle``). Returns the jobs newly recorded.

    Raises ``MetricsUnavailable`` when Prometheus cannot answer: no metrics, no finding.
    """
    report = idle_report_get(user=AnonymousUser(), teams=Team.objects.all(), now=now)
    recorded = []
    for idle in report.jobs:
        job = idle.job
        peak = "no samples" if idle.peak_utilisation is None else f"{idle.peak_utilisation:.1f}%"
        message = (
            f"All {idle.gpus_held} GPU(s) stayed under {report.threshold_percent:g}% "
            f"utilisation for the last {report.window_minutes:g} min (peak {peak}); "
            f"{idle.wasted_gpu_hours:.1f} GPU-hours held idle so far. Free them if the work "
            "is done or stuck."
        )
        run = job.started_at.isoformat() if job.started_at else "unknown"
        entry = timeline_add(
            job_id=job.pk,
            reason="IdleGPUs",
            message=message,
            type="Warning",
            dedupe_key=f"idle:{run}",
        )
        if entry is not None:
            recorded.append(job.pk)
    return recorded
