"""Celery tasks that mirror teams into the cluster: thin, take ids, safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction

from cluster import kube
from cluster.services import clusters_tracked
from cluster.tasks import RETRY_TEMPORARY
from core.task_options import ROBUST
from teams.models import Team

logger = logging.getLogger(__name__)


@shared_task(**ROBUST, **RETRY_TEMPORARY, soft_time_limit=60, time_limit=90)
def team_sync_task(team_id: int) -> dict[str, str]:
    """Mirror a team (namespace, ResourceQuota, LimitRange, PriorityClasses) into the cluster.

    A permanent error (the API server refused an object) is raised once, not retried: the
    same request would be refused again.
    """
    from teams.cluster_sync import team_clusters_sync

    if not Team.objects.filter(pk=team_id).exists():
        # Deleted since the task was queued: nothing to mirror, but with Kueue managed its
        # ClusterQueue and LocalQueue go.
        return team_clusters_sync(team_id=None)
    # In every cluster a job may be placed on (jobs.services.placement).
    return team_clusters_sync(team_id=team_id)


@shared_task(**ROBUST, soft_time_limit=100, time_limit=130)
def teams_sync_task() -> dict[int, str]:
    """Periodic (beat): every team's cluster objects, level-triggered.

    One pass, no retries of its own: a team whose objects the cluster refuses is reported
    (and logged) on every pass until an admin fixes what the error names; a cluster that
    cannot be reached is tried again at the next pass.
    """
    from teams.cluster_sync import team_cluster_sync
    from teams.kueue_config import kueue_managed_sync, kueue_sync

    team_ids = list(Team.objects.values_list("pk", flat=True))
    results = dict.fromkeys(team_ids, "ok")
    # In every cluster a job may be placed on (jobs.services.placement), one after another.
    for cluster in clusters_tracked():
        first = cluster.name == settings.CLUSTER_NAME
        where = "" if first else f" in cluster {cluster.name}"
        with kube.on_cluster(cluster.access_to()):
            for team_id in team_ids:
                try:
                    team_cluster_sync(team_id=team_id)
                except Exception as exc:  # noqa: BLE001 - one broken team must not stop the others
                    logger.warning("team %s sync failed%s: %s", team_id, where, exc)
                    results[team_id] = f"error{where}: {exc}"
            try:
                # Kueue's configuration is read back (external mode) from the first alone.
                if first:
                    kueue_sync()
                elif settings.KUEUE_MANAGED:
                    kueue_managed_sync()
            except Exception as exc:  # noqa: BLE001 - reported like a team's
                logger.warning("Kueue configuration sync failed%s: %s", where, exc)
    return results


def team_sync_enqueue(*, team_id: int) -> None:
    transaction.on_commit(lambda: team_sync_task.delay(team_id))


# The names these tasks had before they moved out of jobs.tasks (2026-11-24): a message
# the previous release queued during a rolling deploy still runs. Remove in the next one.
@shared_task(name="jobs.tasks.team_sync_task", **ROBUST, soft_time_limit=60, time_limit=90)
def _team_sync_task_moved(team_id: int) -> dict[str, str]:
    return team_sync_task(team_id)


@shared_task(name="jobs.tasks.teams_sync_task", **ROBUST, soft_time_limit=100, time_limit=130)
def _teams_sync_task_moved() -> dict[int, str]:
    return teams_sync_task()
