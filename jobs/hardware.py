"""A job that failed because a GPU failed says so (the monitoring layer decides, from DCGM's
XID errors; this records it).

A CUDA program whose GPU falls off the bus exits like any failing program (exit code 1,
"CUDA error: unspecified launch failure"): only the driver and DCGM know it was the
hardware. The job's reason becomes ``GPUFailure`` with the explanation, and a timeline entry
of that reason (event ``job.gpu_failed``) tells its owner.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from jobs.models import Job, JobState
from jobs.timeline import timeline_add

GPU_FAILURE = "GPUFailure"


def job_gpu_failure_record(*, job_id: int, message: str) -> bool:
    """Mark a failed job as failed by its hardware (once). Returns whether it changed."""
    with transaction.atomic():
        moved = (
            Job.objects.filter(pk=job_id, state=JobState.FAILED)
            .exclude(reason=GPU_FAILURE)
            .update(reason=GPU_FAILURE, message=message, updated_at=timezone.now())
        )
        if moved:
            timeline_add(job_id=job_id, reason=GPU_FAILURE, message=message, type="Warning")
    return bool(moved)
