"""Celery tasks of the GPU stack: a change of a node's GPU layout driven step by step, and
the beat's safety net. They keep the names they had in ``jobs.tasks`` (queued steps and the
beat schedule of a running portal name them)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import transaction

from core.task_options import ROBUST

# A change of a node's GPU shape: a step every few seconds while it is under way (the
# MIG manager takes a minute or two; moved jobs a grace period each). The safety net
# below picks up a change whose task chain was lost.
GPU_CHANGE_POLL_SECONDS = 2
GPU_CHANGE_POLLS = 1200


@shared_task(
    name="jobs.tasks.gpu_change_task", bind=True, **ROBUST, soft_time_limit=60, time_limit=90
)
def gpu_change_task(self: Any, change_id: int) -> bool:
    """Drive a node's GPU change one step; again shortly until it is over."""
    from gpu_stack.services import gpu_change_step

    if gpu_change_step(change_id=change_id):
        return True
    raise self.retry(countdown=GPU_CHANGE_POLL_SECONDS, max_retries=GPU_CHANGE_POLLS)


@shared_task(name="jobs.tasks.gpu_changes_resume_task", **ROBUST, soft_time_limit=30, time_limit=60)
def gpu_changes_resume_task() -> list[int]:
    """Periodic (beat): queue a step for every change under way (a lost chain resumes; a
    step that runs twice is harmless)."""
    from gpu_stack.services import gpu_changes_active

    changes = gpu_changes_active()
    for change_id in changes:
        gpu_change_task.delay(change_id)
    return changes


def gpu_change_enqueue(*, change_id: int) -> None:
    transaction.on_commit(lambda: gpu_change_task.delay(change_id))
