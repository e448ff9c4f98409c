"""The one way a job's row moves on: a conditional UPDATE and its timeline entry, together.

Apply, requeue, fail, track and lose are each written as "move the row only if it is
still where this step found it" (healthchecks' claim by ``UPDATE … WHERE status=…``):
a concurrent cancel, or another worker doing the same step, wins, and is never undone.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from jobs.models import Job
from jobs.services.timeline import timeline_add


def job_transition(
    *,
    job: Job,
    where: dict[str, Any],
    changes: dict[str, Any],
    event_reason: str = "",
    event_message: str = "",
    event_type: str = "Normal",
) -> bool:
    """Apply ``changes`` to the job's row if it still matches ``where``; when it does and
    an ``event_reason`` is given, add that timeline entry in the same transaction.

    Returns whether the row moved (False: someone else moved it first).
    """
    with transaction.atomic():
        moved = Job.objects.filter(pk=job.pk, **where).update(**changes, updated_at=timezone.now())
        if moved and event_reason:
            timeline_add(
                job_id=job.pk,
                type=event_type,
                reason=event_reason,
                message=event_message,
                state=changes.get("state"),
            )
    return bool(moved)
