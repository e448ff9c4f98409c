"""The idle-GPU policy's writes on jobs: warn (start the countdown), clear it, stop the job,
and a lead's exemption. Deciding who is idle reads Prometheus and lives in the monitoring
layer (``monitoring.services.idle_policy_run``); every move here is a conditional UPDATE,
so a run that overlaps another, a cancel or a finish never acts twice or undoes anything.
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
from jobs.models import Job, JobState
from jobs.services.timeline import timeline_add
from jobs.services.transitions import job_stop
from teams.models import Membership
from teams.selectors import membership_role
from teams.services import audit_record

# Only a running job with GPUs, not exempt, is ever warned or stopped.
_ELIGIBLE = {"state": JobState.RUNNING, "idle_exempt_reason": "", "gpu_count__gt": 0}


def job_idle_warn(*, job_id: int, now: datetime, due: datetime, message: str) -> bool:
    """Start the countdown and tell the owner (timeline ``IdleGPUs``: event ``job.idle``)."""
    with transaction.atomic():
        moved = Job.objects.filter(pk=job_id, idle_warned_at__isnull=True, **_ELIGIBLE).update(
            idle_warned_at=now, idle_action_due=due, updated_at=timezone.now()
        )
        if moved:
            timeline_add(job_id=job_id, reason="IdleGPUs", message=message, type="Warning")
    return bool(moved)


def job_idle_clear(*, job_id: int, message: str) -> bool:
    """Its GPUs are busy again (or a lead exempted it): the countdown stops."""
    with transaction.atomic():
        moved = Job.objects.filter(pk=job_id, idle_warned_at__isnull=False).update(
            idle_warned_at=None, idle_action_due=None, updated_at=timezone.now()
        )
        if moved:
            timeline_add(job_id=job_id, reason="IdleCleared", message=message)
    return bool(moved)


@transaction.atomic
def job_idle_stop(*, job_id: int, message: str, now: datetime | None = None) -> bool:
    """Cancel a training job still idle when its countdown ran out (event
    ``job.idle_stopped``); its objects are deleted and its quota freed, as a cancel does.

    A cancel, not a suspend: a suspended Job keeps its quota in Kueue's sense and the
    portal's, so the GPUs would stay paid for; a training script resumes from its last
    checkpoint when the job is cloned. Returns whether it was stopped (False: it finished,
    was exempted or became active first).
    """
    now = now or timezone.now()
    job = (
        Job.objects.select_for_update()
        .filter(pk=job_id, kind=Job.Kind.TRAINING, idle_action_due__lte=now, **_ELIGIBLE)
        .first()
    )
    if job is None:
        return False
    return job_stop(
        job=job,
        reason="IdleStopped",
        message=message,
        event_type="Warning",
        actor=None,
        audit_action="job.idle_stop",
        audit_changes={"warned_at": job.idle_warned_at.isoformat() if job.idle_warned_at else None},
        now=now,
    )


def idle_exempt_check(*, user: User, job: Job) -> None:
    """Only a lead of the job's team (or a platform admin) exempts it."""
    if membership_role(user=user, team=job.team) != Membership.Role.LEAD:
        raise PermissionDenied(f"Only a lead of team {job.team.slug} exempts its jobs.")


@transaction.atomic
def job_idle_exempt(*, user: User, job_id: int, reason: str) -> Job:
    """A lead exempts a job from the idle-GPU policy (a reason is required) or, with an
    empty reason, ends the exemption. Audited; an exempted job's countdown stops."""
    job = Job.objects.select_for_update(of=("self",)).select_related("team").get(pk=job_id)
    idle_exempt_check(user=user, job=job)
    reason = reason.strip()[:200]
    if reason == job.idle_exempt_reason:
        return job
    old, job.idle_exempt_reason = job.idle_exempt_reason, reason
    job.save(update_fields=["idle_exempt_reason", "updated_at"])
    audit_record(
        actor=user, action="job.idle_exempt", target=job, changes={"reason": [old, reason]}
    )
    who = user.get_username()
    if reason:
        timeline_add(job_id=job.pk, reason="IdleExempt", message=f"Exempted by {who}: {reason}")
        job_idle_clear(job_id=job.pk, message=f"Countdown stopped: exempted by {who}.")
    else:
        timeline_add(job_id=job.pk, reason="IdleExempt", message=f"Exemption ended by {who}.")
    return job


@in_job_cluster
def job_idle_scale_down(*, job_id: int, message: str, now: datetime | None = None) -> bool:
    """Scale an inference deployment still idle at its deadline to zero replicas (event
    ``job.idle_stopped``); ``job_resume`` brings it back with one click.

    1. Read the job (it must still be due, eligible and not scaled down already).
    2. Scale the Deployment to 0 in the cluster (a failure leaves everything as it was:
       the next run tries again).
    3. Record it with a conditional UPDATE; if the job changed meanwhile (exempted,
       cancelled), scale it back.
    Its quota stays held, so resuming can never be refused; its GPUs are free in the
    cluster for any pod that may use them.
    """
    now = now or timezone.now()
    due = Job.objects.filter(
        pk=job_id,
        kind=Job.Kind.INFERENCE,
        idle_action_due__lte=now,
        scaled_to_zero_from__isnull=True,
        **_ELIGIBLE,
    ).first()
    if due is None:
        return False
    replicas = int(due.spec.get("replicas") or 1)
    kube.scale("Deployment", due.object_name, due.namespace, 0)
    with transaction.atomic():
        moved = Job.objects.filter(
            pk=job_id, idle_action_due__lte=now, scaled_to_zero_from__isnull=True, **_ELIGIBLE
        ).update(
            scaled_to_zero_from=replicas,
            reason="ScaledToZero",
            message=message,
            idle_action_due=None,
            updated_at=now,
        )
        if moved:
            timeline_add(job_id=job_id, reason="IdleStopped", message=message, type="Warning")
            audit_record(
                actor=None,
                action="job.idle_scale_to_zero",
                target=due,
                changes={"replicas": [replicas, 0]},
            )
    if not moved:
        kube.scale("Deployment", due.object_name, due.namespace, replicas)
    return bool(moved)


@in_job_cluster
def job_resume(*, user: User, job_id: int) -> Job:
    """Bring back an inference deployment the idle-GPU policy scaled to zero: its owner or a
    lead of its team, in one click."""
    job = Job.objects.select_related("team").get(pk=job_id)
    if job.owner_id != user.pk and membership_role(user=user, team=job.team) != (
        Membership.Role.LEAD
    ):
        raise PermissionDenied(
            f"Only the job's owner or a lead of team {job.team.slug} can resume it."
        )
    if job.scaled_to_zero_from is None or job.state != JobState.RUNNING:
        raise Conflict("The job is not scaled to zero; there is nothing to resume.")
    replicas = job.scaled_to_zero_from
    try:
        kube.scale("Deployment", job.object_name, job.namespace, replicas)
    except kube.ClusterError as exc:
        raise ClusterUnavailable(
            f"The cluster did not scale it back up ({cluster_error_text(exc)}); nothing "
            "changed: try again."
        ) from exc
    with transaction.atomic():
        Job.objects.filter(pk=job.pk).update(
            scaled_to_zero_from=None,
            idle_warned_at=None,
            idle_action_due=None,
            reason="Resuming",
            message=f"Resumed by {user.get_username()}: scaling back to {replicas} replicas.",
            updated_at=timezone.now(),
        )
        timeline_add(
            job_id=job.pk,
            reason="Resumed",
            message=f"Resumed by {user.get_username()}: {replicas} replica(s).",
        )
        audit_record(
            actor=user, action="job.resume", target=job, changes={"replicas": [0, replicas]}
        )
    job.refresh_from_db()
    return job
