"""Celery tasks of monitoring: thin, periodic, safe to run twice."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from core.task_options import ROBUST
from monitoring.prometheus import MetricsUnavailable

logger = logging.getLogger(__name__)


@shared_task(**ROBUST, soft_time_limit=60, time_limit=90)
def idle_policy_task() -> dict[str, list[int]]:
    """Periodic (beat): every team's idle-GPU policy (report, warn, stop)."""
    from monitoring.services import idle_policy_run

    try:
        run = idle_policy_run()
    except MetricsUnavailable as exc:
        # Missing metrics are never read as idleness; the next run looks again.
        logger.warning("idle-GPU policy skipped: %s", exc)
        return {}
    return {
        "reported": run.reported,
        "warned": run.warned,
        "cleared": run.cleared,
        "stopped": run.stopped,
    }


@shared_task(**ROBUST, soft_time_limit=120, time_limit=150)
def workspace_idle_task() -> dict[str, list[int]]:
    """Periodic (beat): every team's workspace rule (warn, stop when idle or too old)."""
    from monitoring.services import workspace_idle_run

    run = workspace_idle_run()
    return {"warned": run.warned, "cleared": run.cleared, "stopped": run.stopped}


@shared_task(**ROBUST, soft_time_limit=1800, time_limit=1900)
def usage_rollup_task() -> dict[str, Any]:
    """Periodic (beat): the GPU-hour rollup of today and of past days not complete yet.
    Prometheus down is not an error here: allocation is written, the days stay incomplete
    and the next run measures them."""
    from monitoring.accounting import rollup_summary, usage_rollup

    return rollup_summary(usage_rollup(limit=int(settings.ACCOUNTING_DAYS_PER_RUN)))


@shared_task(**ROBUST, soft_time_limit=300, time_limit=360)
def monthly_summary_task() -> list[int]:
    """Daily (beat): last month's summary to each team's leads, once it is rolled up."""
    from monitoring.accounting import monthly_summary_send

    return monthly_summary_send()


@shared_task(**ROBUST, soft_time_limit=60, time_limit=90)
def gpu_failures_task() -> list[int]:
    """Periodic (beat): explain the jobs that failed because a GPU failed (XID errors)."""
    from monitoring.gpu_failures import gpu_failures_check

    try:
        return gpu_failures_check()
    except MetricsUnavailable as exc:
        logger.warning("GPU failure check skipped: %s", exc)
        return []
