"""Celery tasks: thin, take ids, safe to run twice; the work is in services.

One import rule for every app's tasks (HackSoft's): services import ``*_task`` and the
``*_enqueue`` helpers from here at module top; a task imports the service it calls inside
its body. So this module imports no service at load time and no import circle can form.

Every task acknowledges late and is rejected (so redelivered) when its worker
dies; only temporary cluster errors are retried, with exponential backoff and
jitter, a bounded number of times. Work whose retries run out is picked up
again by the periodic reconcile.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis
from celery import shared_task
from django.db import transaction

from cluster.tasks import RETRY_TEMPORARY
from core.redis_client import redis_client
from core.task_options import ROBUST
from jobs.models import Job
from jobs.tracking.timings import reconcile_timer

logger = logging.getLogger(__name__)

# Set while an admission run for the team is queued and has not started: a burst of
# submits for one team shares that run instead of queuing one each. The expiry bounds how
# long a run lost with its broker can hold later ones back (reconcile re-queues it anyway).
ADMISSION_QUEUED_KEY = "gpu-portal:admission-queued:{team_id}"
ADMISSION_QUEUED_SECONDS = 60


@shared_task(**ROBUST, soft_time_limit=30, time_limit=60)
def admission_task(team_id: int) -> list[int]:
    """Admit what the team's quota allows, then queue each admitted job's apply."""
    # Cleared before the queue is read: every submit that found the mark committed before
    # this point, so this run sees its job; any later submit queues a run of its own.
    try:
        redis_client().delete(ADMISSION_QUEUED_KEY.format(team_id=team_id))
    except redis.RedisError as exc:
        logger.warning("admission mark not cleared (expires on its own): %s", exc)
    from jobs.services.admission import admission_run

    result = admission_run(team_id=team_id)
    for job_id in result.evicted:
        job_evict_task.delay(job_id)
    for job_id in result.admitted:
        job_apply_task.delay(job_id)
    return result.admitted


# An evicted job's pods take their grace period to stop: look again every few seconds,
# for up to about ten minutes; after that the reconcile's recovery takes over.
EVICT_POLL_SECONDS = 3
EVICT_POLLS = 200


@shared_task(bind=True, **ROBUST, **RETRY_TEMPORARY, soft_time_limit=60, time_limit=90)
def job_evict_task(self: Any, job_id: int) -> str:
    """Stop an evicted job's objects; once they are gone it is back in the queue, and the
    admission of its team's cohort runs (the job that evicted it goes first)."""
    from jobs.services.eviction import EvictOutcome, job_evict

    outcome = job_evict(job_id=job_id)
    if outcome is EvictOutcome.STOPPING:
        raise self.retry(countdown=EVICT_POLL_SECONDS, max_retries=EVICT_POLLS)
    if outcome in (EvictOutcome.REQUEUED, EvictOutcome.STOPPED):
        team_id = Job.objects.filter(pk=job_id).values_list("team_id", flat=True).first()
        if team_id is not None:
            admission_task.delay(team_id)
    return outcome.value


@shared_task(**ROBUST, **RETRY_TEMPORARY, soft_time_limit=60, time_limit=90)
def job_apply_task(job_id: int) -> str:
    from jobs.services.apply import job_apply

    return job_apply(job_id=job_id).value


@shared_task(**ROBUST, **RETRY_TEMPORARY, soft_time_limit=60, time_limit=90)
def job_cleanup_task(job_id: int) -> int:
    from jobs.services.apply import job_cleanup

    return job_cleanup(job_id=job_id)


@shared_task(**ROBUST, soft_time_limit=100, time_limit=130)
def reconcile_task() -> dict[str, Any]:
    """Periodic (beat): bring job rows in line with the cluster, then queue again the work
    whose task was lost (the pass finds it; queuing it is this task's part)."""
    from jobs.tracking.reconcile import cluster_reconcile, reconcile_requeue

    with reconcile_timer():
        report = cluster_reconcile()
    reconcile_requeue(report)
    return report.__dict__


@shared_task(**ROBUST, soft_time_limit=100, time_limit=130)
def progress_refresh_task() -> int:
    """Periodic (beat): the running training jobs' progress and time to finish, read from
    their rank-0 logs (``jobs.services.progress``). A pass that cannot reach the cluster
    changes nothing: the next one reads again."""
    from cluster import kube
    from jobs.services.progress import jobs_progress_refresh

    try:
        return jobs_progress_refresh()
    except kube.ClusterError as exc:
        logger.warning("progress not read: %s", exc)
        return 0


@shared_task(**ROBUST, soft_time_limit=60, time_limit=90)
def job_node_failure_task(job_id: int, evicted: list[dict[str, str]]) -> bool:
    """Explain a job whose node stopped responding and run it again elsewhere (safe twice:
    a job already explained is left as it is)."""
    from jobs.services.hardware import job_node_failure_record

    recorded = job_node_failure_record(job_id=job_id, evicted=evicted)
    if recorded.requeued:
        job_evict_task.delay(job_id)
    return recorded.changed


def admission_enqueue(*, team_id: int) -> None:
    """Queue admission for a team once the current transaction commits, unless a queued
    run that has not started yet will see this transaction's changes anyway."""
    transaction.on_commit(lambda: _admission_publish(team_id))


def _admission_publish(team_id: int) -> None:
    key = ADMISSION_QUEUED_KEY.format(team_id=team_id)
    client = redis_client()
    try:
        if not client.set(key, "1", nx=True, ex=ADMISSION_QUEUED_SECONDS):
            return  # a queued run has yet to start: it will read what just committed
    except redis.RedisError as exc:
        logger.warning("admission mark not set, queuing a run anyway: %s", exc)
    try:
        admission_task.delay(team_id)
    except Exception:
        # Not queued: the next submit must not count on it.
        with contextlib.suppress(redis.RedisError):
            client.delete(key)
        raise


def apply_enqueue(*, job_id: int) -> None:
    """Queue a job's apply once the current transaction commits (Kueue mode: Kueue, not the
    portal, admits it, so it goes to the cluster at once and waits there)."""
    transaction.on_commit(lambda: job_apply_task.delay(job_id))


def evict_enqueue(*, job_id: int) -> None:
    """Delete a job's objects (an eviction, or a workspace stop) once the transaction that
    marked it commits."""
    transaction.on_commit(lambda: job_evict_task.delay(job_id))


def cleanup_enqueue(*, job_id: int) -> None:
    transaction.on_commit(lambda: job_cleanup_task.delay(job_id))


@shared_task(**ROBUST, soft_time_limit=60, time_limit=90)
def jobs_waiting_check_task() -> list[int]:
    """Periodic (beat): tell owners whose jobs have waited longer than the threshold."""
    from jobs.services.notices import jobs_waiting_check

    return jobs_waiting_check()


@shared_task(**ROBUST, soft_time_limit=120, time_limit=150)
def spill_over_task() -> list[int]:
    """Periodic (beat): move jobs for any cluster waiting past their team's spill-over time
    to a cluster where they would start now (``jobs.services.spill_over``)."""
    from jobs.services.spill_over import jobs_spill_over

    return jobs_spill_over()


# Its name from before it moved here, so notices queued by an older release still run.
@shared_task(name="jobs.notices.job_notify_task", **ROBUST, soft_time_limit=30, time_limit=60)
def job_notify_task(job_id: int, event: str, entry_id: int) -> list[int]:
    """Word the notice for a timeline entry and store a delivery per destination."""
    from jobs.services.notices import job_notify

    return job_notify(job_id=job_id, event=event, entry_id=entry_id)
