"""Apply admitted jobs to the cluster, and delete the objects of cancelled ones.

Both are safe to run twice and after a crash at any point: object names are
deterministic, a create that finds its own object counts as done, and the job
row only moves on with a conditional UPDATE that checks it is still due.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from django.utils import timezone

from cluster import kube
from cluster.labels import JOB_ID_LABEL, MANAGED_BY_LABEL
from cluster.selectors import catalog_get
from jobs.cluster_scope import in_job_cluster
from jobs.manifests.security import check_manifests
from jobs.models import Job, JobState
from jobs.services.timeline import timeline_add
from jobs.services.transitions import job_transition
from jobs.services.workspace_objects import workspace_objects_prepare
from teams.cluster_sync import team_cluster_sync

logger = logging.getLogger(__name__)


class ApplyOutcome(StrEnum):
    APPLIED = "applied"
    NOT_DUE = "not-due"
    REQUEUED = "requeued"  # ResourceQuota refused: back to the portal queue
    FAILED = "failed"
    CANCELLED_MEANWHILE = "cancelled-meanwhile"


def _apply_objects(job: Job) -> None:
    manifests = (
        workspace_objects_prepare(job=job) if job.kind == Job.Kind.WORKSPACE else job.manifests
    )
    for manifest in manifests:
        try:
            _create(manifest)
        except kube.ObjectNotFound as exc:
            if "namespaces" not in exc.message:
                raise
            # The team's namespace is missing (new team, or deleted by hand): bootstrap it.
            team_cluster_sync(team_id=job.team_id)
            _create(manifest)


def _create(manifest: dict) -> None:
    if manifest["kind"] == "Secret":
        # A workspace's token: the portal may write Secrets but never read them
        # (deploy/rbac.yaml), so one left by an earlier try is overwritten, not compared.
        try:
            kube.create(manifest)
        except kube.ObjectConflict:
            kube.replace(manifest)
        return
    # A workspace's home claim is the team's (kept across its workspaces), not the job's.
    owner = MANAGED_BY_LABEL if manifest["kind"] == "PersistentVolumeClaim" else JOB_ID_LABEL
    kube.create_idempotent(manifest, owner_label=owner)


@in_job_cluster
def job_apply(*, job_id: int) -> ApplyOutcome:
    """Create the job's objects in the cluster and mark it ``pending``.

    1. Re-read the job: return if it is not admitted (by the portal; with Kueue, Kueue
       admits it later, in the cluster), already applied or final.
    2. Create each manifest in order (idempotent).
    3. Move ``queued`` → ``pending`` only if the row is still queued and unapplied (with
       Kueue: stay ``queued``, applied, until its Workload is admitted).
       If it was cancelled meanwhile, delete what was just created; if another apply of
       the same job moved it first, leave the objects (they are the same ones) to it.

    ``kube.TemporaryClusterError`` propagates: the task retries it with backoff,
    and the reconcile re-queues the job if every retry fails. ``ClusterCredentialsRefused``
    propagates too, unretried: the job stays admitted and queued (it is not its fault) and
    the reconcile re-queues its apply once an operator has fixed the credentials. Nothing
    is lost.
    """
    job = Job.objects.select_related("team").filter(pk=job_id).first()
    if job is None or job.state != JobState.QUEUED or job.applied_at is not None:
        return ApplyOutcome.NOT_DUE
    kueue = job.queueing == Job.Queueing.KUEUE
    if job.admitted_at is None and not kueue:
        return ApplyOutcome.NOT_DUE
    violations = check_manifests(
        job.manifests,
        namespace=job.team.namespace,
        allowed_registries=catalog_get().allowed_registries,
    )
    if violations:
        # Stored manifests are re-checked: the security check (or the row) may have changed.
        _fail(job, reason="PolicyViolation", message="; ".join(str(v) for v in violations[:5]))
        return ApplyOutcome.FAILED
    try:
        _apply_objects(job)
    except kube.QuotaRefused as exc:
        _requeue(job, exc.message)
        return ApplyOutcome.REQUEUED
    except kube.TemporaryClusterError:
        raise
    except kube.PermanentClusterError as exc:
        _fail(job, reason="ApplyFailed", message=f"The API server refused the job: {exc.message}")
        return ApplyOutcome.FAILED
    changes = (
        # Suspended in Kueue's queue: queued until Kueue admits it (the tracker follows).
        {"reason": "Applied", "message": "Created in the cluster; waiting for Kueue to admit it."}
        if kueue
        else {
            "state": JobState.PENDING,
            "reason": "Applied",
            "message": "Created in the cluster; waiting for pods.",
        }
    )
    moved = job_transition(
        job=job,
        where={"state": JobState.QUEUED, "applied_at__isnull": True},
        changes={**changes, "applied_at": timezone.now()},
        event_reason="Applied",
        event_message=f"Created in namespace {job.namespace}.",
    )
    if not moved:
        if _applied_by_another_run(job.pk):
            # Two applies of one job ran at once (a retried task and the one the reconcile
            # queued again after an outage): the other created the same objects and moved
            # the row. They are the job's now; deleting them would lose it.
            return ApplyOutcome.NOT_DUE
        # Cancelled while we were creating: don't leave orphans behind.
        job_cleanup(job_id=job.pk)
        return ApplyOutcome.CANCELLED_MEANWHILE
    return ApplyOutcome.APPLIED


def _applied_by_another_run(job_id: int) -> bool:
    return (
        Job.objects.filter(pk=job_id, applied_at__isnull=False)
        .exclude(state__in=(JobState.CANCELLED, JobState.STOPPED))
        .exists()
    )


def _requeue(job: Job, message: str) -> None:
    """Back to the portal's queue: admission will try it again as quota frees."""
    job_transition(
        job=job,
        where={"state": JobState.QUEUED},
        changes={
            "admitted_at": None,
            "reason": "QuotaExceeded",
            "message": f"The cluster's ResourceQuota refused it: {message}",
        },
        event_reason="QuotaExceeded",
        event_message=message,
        event_type="Warning",
    )


def _fail(job: Job, *, reason: str, message: str) -> None:
    job_transition(
        job=job,
        where={"state": JobState.QUEUED},
        changes={
            "state": JobState.FAILED,
            "reason": reason,
            "message": message,
            "finished_at": timezone.now(),
        },
        event_reason=reason,
        event_message=message,
        event_type="Warning",
    )


@in_job_cluster
def job_cleanup(*, job_id: int) -> int:
    """Delete a finished or cancelled job's objects (background propagation).

    Returns how many objects were deleted; objects already gone count as done.
    """
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return 0
    deleted = 0
    for manifest in reversed(job.manifests):
        meta = manifest["metadata"]
        if kube.delete(manifest["kind"], meta["name"], meta.get("namespace")):
            deleted += 1
    if deleted:
        timeline_add(
            job_id=job.pk,
            reason="Deleted",
            message=f"Deleted {deleted} object(s) from the cluster.",
        )
    return deleted
