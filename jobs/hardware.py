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

import re
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from cluster import kube
from core.errors import ApplicationError
from jobs.models import Job, JobState
from jobs.services import job_manifests_rebuild
from jobs.tasks import job_evict_task
from jobs.timeline import timeline_add
from jobs.transitions import job_transition

GPU_FAILURE = "GPUFailure"
# What a training script prints after saving a checkpoint (docs/jobs.md), e.g.
# "GPU_PORTAL_CHECKPOINT step=41000 path=/checkpoints/step-41000.pt".
CHECKPOINT_LINE = re.compile(r"^(?P<at>\S+) .*\bGPU_PORTAL_CHECKPOINT step=(?P<step>\d+)")
LOG_LINES_READ = 2000


@dataclass(frozen=True)
class Lost:
    """What a failed run cost: GPU-hours since its last checkpoint (or since it started)."""

    gpu_hours: float
    step: int | None
    checkpoint_at: datetime | None


def _last_checkpoint(job: Job, pods: list[str]) -> tuple[int, datetime] | None:
    """The newest checkpoint line the failed pods logged (their logs with timestamps)."""
    found: tuple[int, datetime] | None = None
    for pod in pods:
        try:
            text = kube.pod_log(pod, job.namespace, tail_lines=LOG_LINES_READ, timestamps=True)
        except kube.ClusterError:
            continue  # the pod is gone or the cluster away: nothing reported from it
        for line in text.splitlines():
            match = CHECKPOINT_LINE.match(line)
            at = parse_datetime(match["at"]) if match else None
            if match and at is not None and (found is None or at > found[1]):
                found = (int(match["step"]), at)
    return found


def _lost(job: Job, pods: list[str]) -> Lost:
    end = job.finished_at or timezone.now()
    checkpoint = _last_checkpoint(job, pods) if (job.spec or {}).get("checkpoint") else None
    since = checkpoint[1] if checkpoint else job.started_at or end
    hours = job.gpu_count * max(0.0, (end - since).total_seconds()) / 3600
    return Lost(hours, checkpoint[0] if checkpoint else None, checkpoint[1] if checkpoint else None)


def job_gpu_failure_record(
    *, job_id: int, message: str, nodes: list[str] | None = None, pods: list[str] | None = None
) -> bool:
    """Mark a failed job as failed by its hardware (once), count the GPU-hours it lost since
    its last checkpoint (read from the failed ``pods``' logs), and run a training job again
    on other nodes while it has retries left. Returns whether it changed."""
    candidate = Job.objects.filter(pk=job_id, state=JobState.FAILED).first()
    lost = _lost(candidate, pods or []) if candidate is not None else Lost(0.0, None, None)
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
        if lost.step is not None and lost.checkpoint_at is not None:
            message += (
                f" About {lost.gpu_hours:.2f} GPU-hours were lost since its last checkpoint "
                f"(step {lost.step:,} at {timezone.localtime(lost.checkpoint_at):%H:%M})."
            )
        elif job.kind == Job.Kind.TRAINING:
            message += f" About {lost.gpu_hours:.2f} GPU-hours were lost (no checkpoint)."
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
            reason=GPU_FAILURE,
            message=message,
            gpu_hours_lost=F("gpu_hours_lost") + lost.gpu_hours,
            updated_at=timezone.now(),
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
