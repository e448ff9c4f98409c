"""Workspaces (docs/workspaces.md): the writes that are theirs alone. A workspace is a job of
kind ``workspace``: it is checked, admitted, applied and tracked as every job is
(``jobs.services.workspace_objects`` holds what applying one needs); here are stop / start
/ delete and the idle warning.

- **Stop** (its owner, a lead, or the idle policy): the row goes back to ``queued`` with
  ``evicted_at`` and ``stop_requested_at`` set, and the eviction path deletes its objects;
  once they are gone (its quota counted until then) it moves to ``stopped``
  (``jobs.services.eviction``). The home claim is never part of its objects.
- **Start**: ``stopped`` → ``queued``, admitted like a new job, applied from its stored
  manifests, with the same home claim.
- **Delete**: a cancel; the home claim goes too only when its owner asks and no other
  workspace of theirs in the team uses it.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from cluster import kube
from cluster.nodes import cluster_error_text
from core.errors import ClusterUnavailable, Conflict, PermissionDenied
from jobs.cluster_scope import in_job_cluster
from jobs.manifests.naming import home_claim_name
from jobs.models import ACTIVE_STATES, LIVE_STATES, Job, JobState
from jobs.selectors.workspace_access import WORKSPACE_PATH
from jobs.services.eviction import job_requeue
from jobs.services.timeline import timeline_add
from jobs.services.transitions import job_stop, job_transition
from jobs.tasks import admission_enqueue, apply_enqueue
from teams.services import audit_record
from workspaces.selectors import workspace_can_manage


def workspace_idle_warn(*, job_id: int, now: datetime, due: datetime, message: str) -> bool:
    """Start a running workspace's countdown and tell its owner (timeline ``WorkspaceIdle``:
    event ``workspace.idle``; the banner on its page reads ``idle_action_due``)."""
    with transaction.atomic():
        moved = Job.objects.filter(
            pk=job_id,
            kind=Job.Kind.WORKSPACE,
            state=JobState.RUNNING,
            idle_warned_at__isnull=True,
            idle_exempt_reason="",
        ).update(idle_warned_at=now, idle_action_due=due, updated_at=timezone.now())
        if moved:
            timeline_add(job_id=job_id, reason="WorkspaceIdle", message=message, type="Warning")
    return bool(moved)


def _workspace_for(user: User, job_id: int) -> Job:
    job = Job.objects.select_for_update(of=("self",)).select_related("team").get(pk=job_id)
    if job.kind != Job.Kind.WORKSPACE:
        raise Conflict(f"Job {job.pk} is a {job.kind} job, not a workspace.")
    if not workspace_can_manage(user=user, job=job):
        raise PermissionDenied(
            f"Only the workspace's owner or a lead of team {job.team.slug} can do this."
        )
    return job


# A stop's timeline reason → the stopped workspace's reason (others are kept as they are:
# ``IdleStopped``, ``LifetimeStopped``), so the list's "why" says who or what stopped it.
STOPPED_REASONS = {"StopRequested": "Stopped"}


def workspace_stop_begin(
    *, job: Job, reason: str, message: str, actor: User | None, event_type: str = "Normal"
) -> bool:
    """Stop a workspace that is queued or running (the owner's click, or the idle policy).

    1. Not yet in the cluster: straight to ``stopped`` (and out of the queue).
    2. Otherwise: back to ``queued`` with ``evicted_at`` and ``stop_requested_at``; the
       eviction task deletes its objects and, once they are gone, moves it to ``stopped``.
    Either way the stopped workspace's reason says why (``STOPPED_REASONS``: the owner's
    stop is ``Stopped``, the team's rules their own) and its message is ``message``.
    Returns whether it moved (False: it finished or was stopped first).
    """
    now = timezone.now()
    stopped_reason = STOPPED_REASONS.get(reason, reason)
    with transaction.atomic():
        if job.applied_at is None and job.admitted_at is None:
            moved = job_transition(
                job=job,
                where={"state": JobState.QUEUED, "applied_at__isnull": True},
                changes={"state": JobState.STOPPED, "reason": stopped_reason, "message": message},
                event_reason=reason,
                event_message=message,
                event_type=event_type,
            )
        else:
            # Not counted as an eviction: its owner (or the idle policy) stopped it.
            moved = job_requeue(
                job=job,
                reason="Stopping",
                message=f"{message} Deleting its pod; the home folder is kept.",
                event_reason=reason,
                event_message=message,
                event_type=event_type,
                where={"state__in": ACTIVE_STATES, "stop_requested_at__isnull": True},
                counted=False,
                also={
                    "stop_requested_at": now,
                    "stop_reason": stopped_reason,
                    "stop_message": message,
                    "idle_warned_at": None,
                    "idle_action_due": None,
                },
            )
        if moved:
            audit_record(
                actor=actor, action="workspace.stop", target=job, changes={"reason": reason}
            )
    return moved


@transaction.atomic
def workspace_stop(*, user: User, job_id: int) -> Job:
    job = _workspace_for(user, job_id)
    if job.state not in ACTIVE_STATES or job.stop_requested_at is not None:
        raise Conflict(f"The workspace is {job.state}; there is nothing to stop.")
    workspace_stop_begin(
        job=job, reason="StopRequested", message=f"Stopped by {user.get_username()}.", actor=user
    )
    job.refresh_from_db()
    return job


@transaction.atomic
def workspace_start(*, user: User, job_id: int) -> Job:
    """A stopped workspace queues again for admission, as a new job would (a running one
    holds its quota; a stopped one does not)."""
    job = _workspace_for(user, job_id)
    if job.state != JobState.STOPPED:
        raise Conflict(f"The workspace is {job.state}, not stopped; there is nothing to start.")
    job_transition(
        job=job,
        where={"state": JobState.STOPPED},
        changes={
            "state": JobState.QUEUED,
            "reason": "Starting",
            "message": "Waiting for admission against the team's quota.",
            "finished_at": None,
        },
        event_reason="Started",
        event_message=f"Started again by {user.get_username()}.",
    )
    audit_record(actor=user, action="workspace.start", target=job)
    if job.queueing == Job.Queueing.KUEUE:
        apply_enqueue(job_id=job.pk)
    else:
        admission_enqueue(team_id=job.team_id)
    job.refresh_from_db()
    return job


@in_job_cluster
def workspace_delete(*, user: User, job_id: int, delete_home: bool = False) -> Job:
    """Delete a workspace (a cancel: its objects go, its GPU-hours stay in the report) and,
    when its owner asks (``delete_home``), its home claim: refused while another of the
    owner's workspaces in the team still uses it."""
    with transaction.atomic():
        job = _workspace_for(user, job_id)
        claim = home_claim_name(job.owner.get_username())
        if delete_home:
            _check_home_unused(job)
        if job.state in LIVE_STATES:
            job_stop(
                job=job,
                reason="Deleted",
                message=f"Deleted by {user.get_username()}.",
                actor=user,
                audit_action="workspace.delete",
                where={"state__in": LIVE_STATES},
            )
    if delete_home:
        try:
            kube.delete("PersistentVolumeClaim", claim, job.namespace)
        except kube.ClusterError as exc:
            raise ClusterUnavailable(
                f"The workspace is deleted, but the cluster did not delete its home folder "
                f"{claim} ({cluster_error_text(exc)}); try again."
            ) from exc
        audit_record(
            actor=user, action="workspace.home_delete", target=job, changes={"claim": claim}
        )
    job.refresh_from_db()
    return job


def _check_home_unused(job: Job) -> None:
    others = list(
        Job.objects.filter(
            team_id=job.team_id,
            owner_id=job.owner_id,
            kind=Job.Kind.WORKSPACE,
            state__in=LIVE_STATES,
        )
        .exclude(pk=job.pk)
        .values_list("name", flat=True)
    )
    if others:
        raise Conflict(
            f"The home folder is also the home of {', '.join(others)}: delete those first, or "
            "keep the home folder."
        )


def workspace_url(job: Job) -> str:
    """Where its owner opens it: under ``/workspaces/<id>/`` of the portal's own origin
    (the proxy serves that path)."""
    return WORKSPACE_PATH.format(id=job.pk)
