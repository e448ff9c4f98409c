"""The portal's lines of a job's timeline, and the notices they trigger.

Every timeline entry the portal writes goes through ``timeline_add`` (or ``_many``), which
checks it against the event table (``notifications.events``) and, when it triggers an
event, queues the notice on commit. So a state change and the notice it causes commit (or
roll back) together, the notice never delays the change, and a new event type is a line in
that table.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, transaction

from jobs.models import JobEvent
from jobs.tasks import job_notify_task
from notifications.events import event_for


def _notify(entry: JobEvent, state: str | None) -> None:
    event = event_for(state=state, reason=entry.reason)
    if event is None:
        return
    job_id, entry_id = entry.job_id, entry.pk
    transaction.on_commit(lambda: job_notify_task.delay(job_id, event.key, entry_id))


def timeline_add(
    *,
    job_id: int,
    reason: str,
    message: str = "",
    type: str = "Normal",
    state: str | None = None,
    dedupe_key: str = "",
) -> JobEvent | None:
    """Add one entry; ``state`` is the state the job moved to with it (None: no move).

    With a ``dedupe_key`` the entry is added once per job (None when it exists already)."""
    fields = {"job_id": job_id, "reason": reason, "message": message, "type": type}
    if dedupe_key:
        try:
            with transaction.atomic():  # a savepoint: the caller's transaction goes on
                entry: JobEvent | None = JobEvent.objects.create(**fields, dedupe_key=dedupe_key)
        except IntegrityError:
            entry = None  # added before: once per job
    else:
        entry = JobEvent.objects.create(**fields)
    if entry is not None:
        _notify(entry, state)
    return entry


def timeline_add_many(entries: Iterable[JobEvent], *, state: str | None = None) -> None:
    """Add entries of several jobs that moved the same way (e.g. admitted in one pass)."""
    for entry in JobEvent.objects.bulk_create(list(entries)):
        _notify(entry, state)
