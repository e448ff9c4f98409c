"""Celery tasks of the cluster adapter, and the retry policy every app's tasks share.

Kopf's split (``docs/errors.rst``): a ``TemporaryClusterError`` (5xx, 429, timeouts,
refused connections) is retried with exponential backoff and jitter, a bounded number of
times; every other error is permanent and never retried (the periodic reconcile and sync
pick the work up again, or an admin fixes what the error names).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from cluster.kube import TemporaryClusterError
from cluster.services import catalog_refresh

logger = logging.getLogger(__name__)

# Acknowledged late and rejected (so redelivered) when the worker dies mid-task.
ROBUST: dict[str, Any] = {"acks_late": True, "reject_on_worker_lost": True}
RETRY_TEMPORARY: dict[str, Any] = {
    "autoretry_for": (TemporaryClusterError,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 8,
}


@shared_task(**ROBUST, soft_time_limit=100, time_limit=130)
def catalog_refresh_task() -> dict[str, list[str]]:
    """Periodic (beat): add the GPU products and MIG profiles the nodes advertise."""
    return catalog_refresh()
