"""Apply admitted jobs to the cluster, and delete the objects of cancelled ones.

Both are safe to run twice and after a crash at any point: object names are
deterministic, a create that finds its own object counts as done, and the job
row only moves on with a conditional UPDATE that checks it is still due.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from django.db import transaction
from django.utils import timezone

from cluster import kube
from cluster.labels import JOB_ID_LABEL
from cluster.selectors import catalog_get
from jobs.models import Job, JobEvent, JobState
from jobs.policy import check_manifests
from teams.cluster_sync import team_cluster_sync

logger = logging.getLogger(__name__)


class ApplyOutcome(StrEnum):
    APPLIED = "applied"
    NOT_DUE = "not-due"
    REQUEUED = "requeued"  # ResourceQuota refused: back to the portal queue
    FAILED = "failed"
    CANCELLED_MEANWHILE = "cancelled-meanwhile"


def _apply_objects(job: Job) -> None:
    for manifest in job.manifests:
        try:
            kube.create_idempotent(manifest, owner_label=JOB_ID_LABEL)
        except kube.ObjectNotFound as exc:
            if "namespaces" not in exc.message:
                raise
            # The team's namespace is missing (new team, or deleted by hand): bootstrap it.
            team_cluster_sync(team_id=job.team_id)
            kube.create_idempotent(manifest, owner_label=JOB_ID_LABEL)


def job_apply(*, job_id: int) -> ApplyOutcome:
    """Create the job's objects in the cluster and mark it ``pending``.

    1. Re-read the job: return if it is not admitted, already applied or final.
    2. Create each manifest in order (idempotent).
    3. Move ``queued`` → ``pending`` only if the row is still queued and unapplied.
       If it was cancelled meanwhile, delete what was just created.

    ``kube.TemporaryClusterError`` propagates: the task retries it with backoff,
    and the reconcile re-queues the job if every retry fails. Nothing is lost.
    """
    job = Job.objects.select_related("team").filter(pk=job_id).first()
    if (
        job is None
        or job.state != JobState.QUEUED
        or job.admitted_at is None
        or job.applied_at is not None
    ):
        return ApplyOutcome.NOT_DUE
    violations = check_manifests(
        job.manifests,
        namespace=job.team.namespace,
        allowed_registries=catalog_get().allowed_registries,
    )
    if violations:
        # Stored manifests are re-checked: the policy (or the row) may have changed since.
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
    now = timezone.now()
    with transaction.atomic():
        moved = Job.objects.filter(
            pk=job.pk, state=JobState.QUEUED, applied_at__isnull=True
        ).update(
            state=JobState.PENDING,
            applied_at=now,
            reason="Applied",
            message="Created in the cluster; waiting for pods.",
            updated_at=now,
        )
        if moved:
            JobEvent.objects.create(
                job=job, reason="Applied", message=f"Created in namespace {job.namespace}."
            )
    if not moved:
        # Cancelled while we were creating: don't leave orphans behind.
        job_cleanup(job_id=job.pk)
        return ApplyOutcome.CANCELLED_MEANWHILE
    return ApplyOutcome.APPLIED


def _requeue(job: Job, message: str) -> None:
    with transaction.atomic():
        updated = Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
            admitted_at=None,
            reason="QuotaExceeded",
            message=f"The cluster's ResourceQuota refused it: {message}",
            updated_at=timezone.now(),
        )
        if updated:
            JobEvent.objects.create(
                job=job, type="Warning", reason="QuotaExceeded", message=message
            )


def _fail(job: Job, *, reason: str, message: str) -> None:
    with transaction.atomic():
        now = timezone.now()
        updated = Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
            state=JobState.FAILED, reason=reason, message=message, finished_at=now, updated_at=now
        )
        if updated:
            JobEvent.objects.create(job=job, type="Warning", reason=reason, message=message)


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
        JobEvent.objects.create(
            job=job, reason="Deleted", message=f"Deleted {deleted} object(s) from the cluster."
        )
    return deleted
