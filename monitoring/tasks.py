"""Celery tasks of monitoring: thin, periodic, safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task

from cluster.tasks import ROBUST
from monitoring.prometheus import MetricsUnavailable
from monitoring.services import idle_gpus_record

logger = logging.getLogger(__name__)


@shared_task(**ROBUST, soft_time_limit=60, time_limit=90)
def idle_gpus_check_task() -> list[int]:
    """Periodic (beat): record (and notify) jobs that hold GPUs idle."""
    try:
        return idle_gpus_record()
    except MetricsUnavailable as exc:
        # Missing metrics are never read as idleness; the next run looks again.
        logger.warning("idle-GPU check skipped: %s", exc)
        return []
