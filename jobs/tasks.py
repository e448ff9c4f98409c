"""Celery tasks: thin, take ids, safe to run twice; the work is in services."""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

from jobs.admission import admission_run


@shared_task(acks_late=True, reject_on_worker_lost=True, soft_time_limit=30, time_limit=60)
def admission_task(team_id: int) -> list[int]:
    """Admit what the team's quota allows; returns the admitted job ids."""
    return admission_run(team_id=team_id).admitted


def admission_enqueue(*, team_id: int) -> None:
    """Queue admission for a team once the current transaction commits."""
    transaction.on_commit(lambda: admission_task.delay(team_id))
