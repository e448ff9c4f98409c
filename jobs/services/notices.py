"""Notices about jobs: what a person reads when their job changes.

``timeline_add`` queues ``jobs.tasks.job_notify_task`` on commit for each timeline entry
that triggers an event; the task calls ``job_notify``, which words the notice from the job
as it is now (the last log lines of a failed job are read from the cluster here, never in
the transition) and publishes it to the owner's and the team's destinations
(``notifications.services.notice_publish``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import CharField, Exists, OuterRef, Q, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from jobs.models import Job, JobEvent, JobState
from jobs.selectors.jobs import job_output
from jobs.selectors.live import job_log_tail
from jobs.selectors.queue_position import job_queue_position
from jobs.services.timeline import timeline_add
from notifications.events import event_get
from notifications.services import Notice, notice_publish

logger = logging.getLogger(__name__)


# The job's fields a notice carries (docs/notifications.md), as the API returns them.
NOTICE_JOB_FIELDS = (
    "id",
    "team",
    "name",
    "kind",
    "owner",
    "state",
    "reason",
    "message",
    "exit_code",
    "gpu_count",
    "advice",
)


def _notice_fields(job: Job) -> dict[str, Any]:
    public = job_output(job)
    return {name: public[name] for name in NOTICE_JOB_FIELDS}


def _log_tail(job: Job) -> tuple[list[str], str]:
    """The last lines of the failed pod's log (the one with the most to say), or why not."""
    logs = job_log_tail(job=job, tail=settings.NOTIFY_LOG_LINES)
    if logs.error:
        return [], f"(logs unavailable: {logs.error})"
    with_text = [pod for pod in logs.pods if pod.log.strip()]
    if not with_text:
        return [], f"(no log lines: {logs.detail or 'the pods wrote nothing'})"
    pod = with_text[-1]
    lines = pod.log.splitlines()[-settings.NOTIFY_LOG_LINES :]
    return lines, f"Last {len(lines)} lines of {pod.pod}:"


def job_notice_build(*, job: Job, event: str, entry: JobEvent) -> Notice:
    """The notice for one event of one job, in plain words."""
    kind = event_get(event)
    url = f"{settings.PORTAL_URL}/jobs/{job.pk}/"
    title = f"{job.team.slug}/{job.name} #{job.pk} {kind.label}"
    lines = [f"Job {job.name} (#{job.pk}, team {job.team.slug}) {kind.label}.", ""]
    summary = entry.message or job.message
    if summary:
        lines.append(summary)
    facts = [
        ("State", f"{job.state} ({job.reason})" if job.reason else str(job.state)),
        ("GPUs", f"{job.gpu_count} {job.spec.get('gpu', {}).get('product') or ''}".strip()),
    ]
    if job.state == JobState.FAILED and job.exit_code is not None:
        facts.append(("Exit code", str(job.exit_code)))
        title += f" (exit code {job.exit_code})"
    log_lines: list[str] = []
    if event == "job.failed":
        log_lines, heading = _log_tail(job)
        lines += ["", heading, *(f"  {line}" for line in log_lines)]
    if event == "job.waiting":
        if job.advice:
            lines += ["", f"Why it waits: {job.advice}"]
        position = job_queue_position(job=job)
        if position is not None:
            facts.append(("Queue position", f"{position.team} in team {job.team.slug}"))
            facts.append(("Expected start", position.estimate))
    lines += ["", *(f"{name}: {value}" for name, value in facts), "", f"Open the job: {url}"]
    payload: dict[str, Any] = {
        "event": event,
        "summary": summary,
        "occurred_at": entry.created_at.isoformat(),
        "job": {**_notice_fields(job), "url": url},
        "log_tail": log_lines,
    }
    return Notice(
        key=f"job:{job.pk}:{event}:{entry.pk}",
        event=event,
        user_id=job.owner_id,
        team_id=job.team_id,
        subject=f"[GPU Portal] {title}",
        body="\n".join(lines).strip() + "\n",
        payload=payload,
    )


def job_notify(*, job_id: int, event: str, entry_id: int) -> list[int]:
    """Word the notice for a timeline entry and store a delivery per destination.

    Safe to run twice: the deliveries are unique on the notice's key."""
    job = Job.objects.select_related("team", "owner", "cluster").filter(pk=job_id).first()
    entry = JobEvent.objects.filter(pk=entry_id, job_id=job_id).first()
    if job is None or entry is None:
        return []
    return notice_publish(notice=job_notice_build(job=job, event=event, entry=entry))


def _waiting_since(job: Job) -> datetime:
    if job.state == JobState.PENDING and job.applied_at:
        return job.applied_at
    return job.evicted_at or job.created_at


def jobs_waiting_check(*, now: datetime | None = None) -> list[int]:
    """Add a ``WaitingLong`` entry (which notifies the owner) to each job that has been
    queued or pending longer than ``NOTIFY_WAITING_AFTER_MINUTES``: once per job and state
    (and again after each eviction)."""
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=settings.NOTIFY_WAITING_AFTER_MINUTES)
    # Jobs told before about this wait are skipped in SQL, so a long queue costs one query.
    key = Concat(
        Value("waiting:"), OuterRef("state"), Value(":"), Cast(OuterRef("evictions"), CharField())
    )
    told = JobEvent.objects.filter(job=OuterRef("pk"), dedupe_key=key)
    candidates = (
        Job.objects.filter(
            Q(state=JobState.QUEUED, created_at__lt=cutoff)
            | Q(state=JobState.PENDING, applied_at__lt=cutoff)
        )
        .exclude(Exists(told))
        .only("state", "evictions", "evicted_at", "created_at", "applied_at", "message", "reason")
    )
    added = []
    for job in candidates.iterator():
        since = _waiting_since(job)
        if since >= cutoff:
            continue
        minutes = int((now - since).total_seconds() // 60)
        waits = f"{job.state} for {minutes} min"
        message = f"It has been {waits}: {job.message or job.reason}"
        entry = timeline_add(
            job_id=job.pk,
            reason="WaitingLong",
            message=message,
            type="Warning",
            dedupe_key=f"waiting:{job.state}:{job.evictions}",
        )
        if entry is not None:
            added.append(job.pk)
    return added
