"""Celery tasks of monitoring: thin, periodic, safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task

from cluster.tasks import ROBUST
from monitoring.prometheus import MetricsUnavailable
from monitoring.services import idle_policy_run

logger = logging.getLogger(__name__)


@shared_task(**ROBUST, soft_time_limit=60, time_limit=90)
def idle_policy_task() -> dict[str, list[int]]:
    """Periodic (beat): every team's idle-GPU policy (report, warn, stop)."""
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
