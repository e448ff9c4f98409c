"""Celery tasks of the cluster adapter, and the retry options of every task that calls the
cluster: a ``TemporaryClusterError`` is retried (``core.task_options``), nothing else."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from cluster.kube import TemporaryClusterError
from core.task_options import ROBUST, retry_temporary

logger = logging.getLogger(__name__)

RETRY_TEMPORARY: dict[str, Any] = retry_temporary(TemporaryClusterError)


@shared_task(**ROBUST, soft_time_limit=100, time_limit=130)
def catalog_refresh_task() -> dict[str, list[str]]:
    """Periodic (beat): add the GPU products and MIG profiles the nodes advertise."""
    from cluster.services import catalog_refresh

    return catalog_refresh()
