"""The one way a job's state changes: a conditional UPDATE and its timeline entry, together.

Apply, requeue, fail, track, lose, evict, cancel and the idle stop are each written as "move
the row only if it is still where this step found it" (healthchecks' claim by
``UPDATE … WHERE status=…``): a concurrent cancel, or another worker doing the same step,
wins, and is never undone. ``job_transition`` is the only code that writes ``Job.state``
after a job is submitted (``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from jobs.models import ACTIVE_STATES, Job, JobState
from jobs.services.timeline import timeline_add
from jobs.tasks import admission_enqueue, cleanup_enqueue
from teams.services import audit_record


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


@transaction.atomic
def job_stop(
    *,
    job: Job,
    reason: str,
    message: str,
    actor: User | None,
    audit_action: str,
    audit_changes: dict[str, Any] | None = None,
    where: dict[str, Any] | None = None,
    event_type: str = "Normal",
    now: datetime | None = None,
) -> bool:
    """Cancel a job that has not finished, if it still matches ``where``: its row moves to
    ``cancelled`` with its timeline entry, the stop is audited, its objects are deleted
    (when it reached the cluster) and its team's admission runs for the quota it frees.
    A user's cancel and the idle policy's stop both end here.

    Returns whether it was stopped (False: it finished, or changed, first).
    """
    now = now or timezone.now()
    moved = job_transition(
        job=job,
        where={"state__in": ACTIVE_STATES, **(where or {})},
        changes={
            "state": JobState.CANCELLED,
            "reason": reason,
            "message": message,
            "finished_at": now,
            "idle_action_due": None,
        },
        event_reason=reason,
        event_message=message,
        event_type=event_type,
    )
    if not moved:
        return False
    audit_record(actor=actor, action=audit_action, target=job, changes=audit_changes)
    if job.applied_at is not None:
        cleanup_enqueue(job_id=job.pk)
    admission_enqueue(team_id=job.team_id)
    return True
