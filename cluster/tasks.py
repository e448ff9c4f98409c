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
    """Periodic (beat): add the GPU products and MIG profiles the nodes advertise, in every
    cluster that is not disabled (the catalog offers what any of them has)."""
    from cluster import kube
    from cluster.services import catalog_refresh, clusters_tracked

    added: dict[str, list[str]] = {"products": [], "mig_profiles": []}
    for index, cluster in enumerate(clusters_tracked()):
        try:
            with kube.on_cluster(cluster.access_to()):
                for what, names in catalog_refresh().items():
                    added[what] += names
        except kube.ClusterError as exc:
            if index == 0:
                raise
            # Another cluster down holds up no other: its products wait for the next pass.
            logger.warning("GPU catalog: cluster %s not read: %s", cluster.name, exc)
    return added
