"""A job that failed because its hardware failed says so, and a training job runs again
elsewhere.

Two failures look like the program's own from inside the cluster:

- a GPU that fails under a CUDA program (it exits 1, "CUDA error: unspecified launch
  failure"): only the driver and DCGM know; the monitoring layer matches the job's devices
  to DCGM's XID errors (``monitoring.gpu_failures``) — reason ``GPUFailure``;
- a node that stops responding: the taint manager evicts its pods, which the Job controller
  counts as failures; tracking sees the eviction on the pod (``DisruptionTarget``,
  ``DeletionByTaintManager``) — reason ``NodeFailure``.

Either way the job's reason and message say what failed, a timeline entry of that reason
tells its owner (events ``job.gpu_failed``, ``job.node_failed``), and a training job goes
back to the queue (up to ``GPU_FAILURE_RETRIES`` times) with the failed nodes excluded and
``RESTART_ATTEMPT`` one higher, so it resumes from its checkpoint (``checkpoint`` in its
spec) on healthy hardware. Going back to the queue is an eviction: the caller queues
``job_evict_task``, which deletes its objects, then it is admitted and applied again
(``jobs.services.eviction``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from cluster import kube
from core.errors import ApplicationError
from jobs.cluster_scope import in_job_cluster
from jobs.models import Job, JobState
from jobs.services.eviction import job_requeue
from jobs.services.submit import job_manifests_rebuild
from jobs.services.timeline import timeline_add
from scheduling.k8s_time import parse_time

GPU_FAILURE = "GPUFailure"
NODE_FAILURE = "NodeFailure"
HARDWARE_FAILURES = (GPU_FAILURE, NODE_FAILURE)
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
    unread: str = ""  # why the failed pods' logs could not be read (a node that is down)


def _last_checkpoint(job: Job, pods: list[str]) -> tuple[tuple[int, datetime] | None, str]:
    """The newest checkpoint line the failed pods logged (their logs with timestamps), and
    why a log could not be read (the API server reads logs from the node's kubelet)."""
    found: tuple[int, datetime] | None = None
    unread = ""
    for pod in pods:
        try:
            text = kube.pod_log(pod, job.namespace, tail_lines=LOG_LINES_READ, timestamps=True)
        except kube.ClusterError as exc:
            unread = exc.message  # the pod is gone, its node down, or the cluster away
            continue
        for line in text.splitlines():
            match = CHECKPOINT_LINE.match(line)
            at = parse_time(match["at"]) if match else None
            if match and at is not None and (found is None or at > found[1]):
                found = (int(match["step"]), at)
    return found, unread


def _lost(job: Job, pods: list[str]) -> Lost:
    end = job.finished_at or timezone.now()
    checkpoint, unread = None, ""
    if (job.spec or {}).get("checkpoint"):
        checkpoint, unread = _last_checkpoint(job, pods)
    since = checkpoint[1] if checkpoint else job.started_at or end
    hours = job.gpu_count * max(0.0, (end - since).total_seconds()) / 3600
    if checkpoint is None:
        return Lost(hours, None, None, unread)
    return Lost(hours, checkpoint[0], checkpoint[1])


@dataclass(frozen=True)
class Recorded:
    changed: bool  # the job was marked (False: not failed, or already marked)
    requeued: bool = False  # back in the queue: the caller queues ``job_evict_task``


def job_hardware_failure_record(
    *,
    job_id: int,
    reason: str,
    message: str,
    nodes: list[str] | None = None,
    pods: list[str] | None = None,
) -> Recorded:
    """Mark a failed job as failed by its hardware (``reason``: ``GPUFailure`` or
    ``NodeFailure``; once), count the GPU-hours it lost since its last checkpoint (read from
    the failed ``pods``' logs), and put a training job back in the queue, away from
    ``nodes``, while it has retries left."""
    if reason not in HARDWARE_FAILURES:
        raise ValueError(f"reason: one of {HARDWARE_FAILURES}, not {reason!r}")
    candidate = Job.objects.filter(pk=job_id, state=JobState.FAILED).first()
    lost = _lost(candidate, pods or []) if candidate is not None else Lost(0.0, None, None)
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .select_related("team")
            .filter(pk=job_id, state=JobState.FAILED)
            .exclude(reason__in=HARDWARE_FAILURES)
            .first()
        )
        if job is None:
            return Recorded(changed=False)
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
            except ApplicationError as exc:  # the security check changed since it was submitted
                again = False
                message += f" It cannot run again as it is: {exc.message}"
        message += _lost_words(job, lost)
        if again:
            away = f"node{'s' if len(nodes or []) > 1 else ''} {', '.join(nodes or ['?'])}"
            if checkpoint and lost.step is not None:
                resume = f", resuming from checkpoint step {lost.step:,} in "
            else:
                resume = ", resuming from its newest checkpoint in " if checkpoint else ""
            message += (
                f" The portal runs it again (attempt {attempt + 1} of {retries + 1}) away from "
                + away
                + (
                    f"{resume}{checkpoint['mount_path']}."
                    if checkpoint
                    else "; it has no checkpoint volume, so it starts from the beginning."
                )
            )
        elif job.kind == Job.Kind.TRAINING and exhausted:
            message += f" It failed on hardware {retries + 1} times: not run again."
        Job.objects.filter(pk=job.pk).update(
            reason=reason,
            message=message,
            gpu_hours_lost=F("gpu_hours_lost") + lost.gpu_hours,
            updated_at=timezone.now(),
        )
        timeline_add(job_id=job.pk, reason=reason, message=message, type="Warning")
        requeued = again and _requeue(
            job,
            reason=reason,
            message=message,
            attempt=attempt,
            excluded=excluded,
            manifests=manifests,
        )
    return Recorded(changed=True, requeued=requeued)


def _lost_words(job: Job, lost: Lost) -> str:
    """What the failure cost, said after its message (nothing for a job that is not a
    training job and reported no checkpoint)."""
    if lost.step is not None and lost.checkpoint_at is not None:
        return (
            f" About {lost.gpu_hours:.2f} GPU-hours were lost since its last checkpoint "
            f"(step {lost.step:,} at {timezone.localtime(lost.checkpoint_at):%H:%M})."
        )
    if job.kind == Job.Kind.TRAINING and lost.unread:
        return (
            f" At most {lost.gpu_hours:.2f} GPU-hours were lost (the whole run: its log, "
            f"where its checkpoints are reported, could not be read: {lost.unread})."
        )
    if job.kind == Job.Kind.TRAINING:
        none = "no checkpoint saved yet" if (job.spec or {}).get("checkpoint") else "no checkpoint"
        return f" About {lost.gpu_hours:.2f} GPU-hours were lost ({none})."
    return ""


def _requeue(
    job: Job,
    *,
    reason: str,
    message: str,
    attempt: int,
    excluded: tuple[str, ...],
    manifests: list[dict[str, Any]],
) -> bool:
    """Back to the queue as an eviction: its objects go, then it is admitted again with the
    new manifests. The failed run's hours stay in the accounting (``earlier_runs``)."""
    # Not counted as an eviction (its retries are); the caller queues the deletion.
    return job_requeue(
        job=job,
        reason=reason,
        message=message,
        event_reason="Retrying",
        event_message=f"Back in the queue after a {'GPU' if reason == GPU_FAILURE else 'node'} "
        f"failure (attempt {attempt + 1}), avoiding {', '.join(excluded)}.",
        event_type="Normal",
        where={"state": JobState.FAILED, "reason": reason},
        counted=False,
        run_ended_at=job.finished_at or timezone.now(),
        also={
            "finished_at": None,
            "exit_code": None,
            "gpu_failure_retries": attempt,
            "excluded_nodes": list(excluded),
            "manifests": manifests,
        },
        enqueue=False,
    )


def node_failure_message(evicted: list[dict[str, str]]) -> str:
    """What the owner reads when the job's node stopped responding: each evicted pod, its
    node and when the taint manager evicted it."""
    parts = []
    for e in evicted:
        at = parse_time(e.get("at") or "")
        when = f" at {timezone.localtime(at):%H:%M}" if at else ""
        parts.append(
            f"pod {e['pod']} failed: node {e['node']} stopped responding (its kubelet stopped "
            f"posting status) and the pod was evicted{when}"
        )
    return "; ".join(parts) + ". The node failed, not the program."


@in_job_cluster
def job_node_failure_record(*, job_id: int, evicted: list[dict[str, str]]) -> Recorded:
    """A job that failed because the taint manager evicted its pods from a node that stopped
    responding (``ReconcileReport.node_failures``): explained, and run again elsewhere."""
    return job_hardware_failure_record(
        job_id=job_id,
        reason=NODE_FAILURE,
        message=node_failure_message(evicted),
        nodes=sorted({e["node"] for e in evicted}),
        pods=sorted({e["pod"] for e in evicted}),
    )
