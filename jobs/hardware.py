"""A job that failed because a GPU failed says so, and a training job runs again elsewhere
(the monitoring layer decides, from DCGM's XID errors; this records it and acts).

A CUDA program whose GPU falls off the bus exits like any failing program (exit code 1,
"CUDA error: unspecified launch failure"): only the driver and DCGM know it was the
hardware. The job's reason becomes ``GPUFailure`` with the explanation, a timeline entry of
that reason (event ``job.gpu_failed``) tells its owner, and a training job goes back to the
queue (up to ``GPU_FAILURE_RETRIES`` times) with the failed nodes excluded and
``RESTART_ATTEMPT`` one higher, so it resumes from its checkpoint (``checkpoint`` in its
spec) on healthy hardware. Going back to the queue is an eviction: its objects are deleted,
then it is admitted and applied again (``jobs.eviction``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import ApplicationError
from jobs.models import Job, JobState
from jobs.services import job_manifests_rebuild
from jobs.tasks import job_evict_task
from jobs.timeline import timeline_add
from jobs.transitions import job_transition

GPU_FAILURE = "GPUFailure"


def job_gpu_failure_record(*, job_id: int, message: str, nodes: list[str] | None = None) -> bool:
    """Mark a failed job as failed by its hardware (once), and run a training job again
    on other nodes while it has retries left. Returns whether it changed."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .select_related("team")
            .filter(pk=job_id, state=JobState.FAILED)
            .exclude(reason=GPU_FAILURE)
            .first()
        )
        if job is None:
            return False
        retries = int(settings.GPU_FAILURE_RETRIES)
        exhausted = job.gpu_failure_retries >= retries
        again = job.kind == Job.Kind.TRAINING and not exhausted
        checkpoint = (job.spec or {}).get("checkpoint")
        attempt = job.gpu_failure_retries + 1
        excluded = tuple(sorted({*job.excluded_nodes, *(nodes or [])}))
        manifests: list[dict[str, Any]] = []
        if again:
            try:
                manifests = job_manifests_rebuild(job=job, attempt=attempt, excluded_nodes=excluded)
            except ApplicationError as exc:  # the policy changed since it was submitted
                again = False
                message += f" It cannot run again as it is: {exc.message}"
        if again:
            message += (
                f" The portal runs it again (attempt {attempt + 1} of {retries + 1}) away from "
                f"node{'s' if len(nodes or []) > 1 else ''} {', '.join(nodes or ['?'])}"
                + (
                    f", resuming from its checkpoints in {checkpoint['mount_path']}."
                    if checkpoint
                    else "; it has no checkpoint volume, so it starts from the beginning."
                )
            )
        elif job.kind == Job.Kind.TRAINING and exhausted:
            message += f" It failed on hardware {retries + 1} times: not run again."
        Job.objects.filter(pk=job.pk).update(
            reason=GPU_FAILURE, message=message, updated_at=timezone.now()
        )
        timeline_add(job_id=job.pk, reason=GPU_FAILURE, message=message, type="Warning")
        if again:
            _requeue(job, attempt=attempt, excluded=excluded, manifests=manifests)
    return True


def _requeue(
    job: Job, *, attempt: int, excluded: tuple[str, ...], manifests: list[dict[str, Any]]
) -> None:
    """Back to the queue as an eviction: its objects go, then it is admitted again with the
    new manifests. The failed run's hours stay in the accounting (``earlier_runs``)."""
    runs = list(job.earlier_runs or [])
    if job.started_at is not None:
        runs.append([job.started_at.isoformat(), (job.finished_at or timezone.now()).isoformat()])
    moved = job_transition(
        job=job,
        where={"state": JobState.FAILED, "reason": GPU_FAILURE},
        changes={
            "state": JobState.QUEUED,
            "evicted_at": timezone.now(),
            "finished_at": None,
            "started_at": None,
            "exit_code": None,
            "earlier_runs": runs,
            "gpu_failure_retries": attempt,
            "excluded_nodes": list(excluded),
            "manifests": manifests,
        },
        event_reason="Retrying",
        event_message=f"Back in the queue after a GPU failure (attempt {attempt + 1}), "
        f"avoiding {', '.join(excluded)}.",
    )
    if moved:
        transaction.on_commit(partial(job_evict_task.delay, job.pk))
