"""Evicted jobs: stop their objects in the cluster, then put them back in the queue.

Admission marks a victim (``state`` queued, reason ``Preempted``, ``evicted_at`` set) in
the transaction that chose it; its quota stays counted (``admitted_at`` is kept) until
its pods are gone, so the GPUs it frees go to the job that evicted it and no one else.

We delete the Job (or Deployment) rather than suspend it: a re-admitted job is created
again from its stored manifests, exactly as the first time, and no suspended object is
left holding a name. The names are deterministic, so the second create must not find the
first object still being deleted: the job is released only when every object and pod of
it is gone. Safe to run twice: deletes of what is gone count as done, and the release is
a conditional UPDATE on the ``evicted_at`` this eviction set.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from django.utils import timezone

from cluster import kube
from cluster.labels import JOB_ID_LABEL
from jobs.cluster_scope import in_job_cluster
from jobs.models import ACTIVE_STATES, Job, JobState
from jobs.services.transitions import job_transition
from jobs.tasks import evict_enqueue


class EvictOutcome(StrEnum):
    NOT_DUE = "not-due"
    STOPPING = "stopping"  # deleted; pods still terminating: try again shortly
    REQUEUED = "requeued"
    STOPPED = "stopped"  # a workspace its owner or the idle policy stopped


def _node_lost(name: str, cache: dict[str, bool]) -> bool:
    """Whether the node stopped responding (its ``Ready`` condition ``Unknown``: the node
    lifecycle controller's verdict when its kubelet stops renewing its Lease), or is gone."""
    if name not in cache:
        try:
            node = kube.get("Node", name)
        except kube.ObjectNotFound:
            cache[name] = True
        else:
            ready = next(
                (
                    c
                    for c in (node.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready"
                ),
                None,
            )
            cache[name] = ready is not None and ready.get("status") == "Unknown"
    return cache[name]


def _remaining(job: Job) -> int:
    """How many of the job's objects and pods the cluster still has.

    A pod deleted on a node that stopped responding stays ``Terminating`` until its kubelet
    confirms, which may be never: such a pod is removed at once (force), as an operator
    would with ``kubectl delete pod --force``, so the job can run again elsewhere. The
    risk a force delete carries, a partitioned node still running the old pod, is the one
    a restart from a checkpoint accepts: the old run can only write an older checkpoint.
    """
    left = 0
    for manifest in job.manifests:
        meta = manifest["metadata"]
        try:
            kube.get(manifest["kind"], meta["name"], meta.get("namespace"))
            left += 1
        except kube.ObjectNotFound:
            pass
    pods = kube.list_all("Pod", namespace=job.namespace, label_selector=f"{JOB_ID_LABEL}={job.pk}")
    lost: dict[str, bool] = {}
    for pod in pods:
        meta, node = pod["metadata"], (pod.get("spec") or {}).get("nodeName")
        if meta.get("deletionTimestamp") and node and _node_lost(node, lost):
            kube.delete("Pod", meta["name"], job.namespace, grace_period_seconds=0)
            continue
        left += 1
    return left


def runs_ended(job: Job, ended: datetime) -> list[list[str]]:
    """The job's ``earlier_runs`` with its current run, ended at ``ended``, added (the
    GPU-hour accounting counts every run a job had, not only its last)."""
    runs = list(job.earlier_runs or [])
    if job.started_at is not None:
        runs.append([job.started_at.isoformat(), ended.isoformat()])
    return runs


def job_requeue(
    *,
    job: Job,
    reason: str,
    message: str,
    event_message: str | None = None,
    event_reason: str | None = None,
    event_type: str = "Warning",
    where: dict[str, Any] | None = None,
    counted: bool = True,
    run_ended_at: datetime | None = None,
    also: dict[str, Any] | None = None,
    enqueue: bool = True,
) -> bool:
    """Send a job back to the queue through the eviction path, the one place that does:
    ``queued`` with ``evicted_at`` set, so ``job_evict`` deletes its objects and releases
    it (its quota stays counted until they are gone); an eviction ``counted`` in
    ``evictions``; with ``run_ended_at``, the run that ended then kept in ``earlier_runs``
    for the GPU-hour accounting. ``where`` guards the move (by default: active and not being
    evicted already); ``also`` are the caller's own fields (a workspace's stop, a hardware
    retry's new manifests). The deletion is queued on commit unless ``enqueue`` is False
    (admission's task queues its victims'). True if the job moved."""
    changes: dict[str, Any] = {
        "state": JobState.QUEUED,
        "reason": reason,
        "message": message,
        "evicted_at": timezone.now(),
    }
    if counted:
        changes["evictions"] = job.evictions + 1
    if run_ended_at is not None:
        changes["earlier_runs"] = runs_ended(job, run_ended_at)
        changes["started_at"] = None
    moved = job_transition(
        job=job,
        where=where or {"state__in": ACTIVE_STATES, "evicted_at__isnull": True},
        changes={**changes, **(also or {})},
        event_reason=event_reason or reason,
        event_message=event_message or message,
        event_type=event_type,
    )
    if moved and enqueue:
        evict_enqueue(job_id=job.pk)
    return moved


def kueue_requeue_changes(job: Job, now: datetime) -> dict[str, Any]:
    """A job Kueue evicted (its Job suspended again; nothing is deleted, so no
    ``evicted_at``): no longer admitted, the eviction counted, its run kept for the
    accounting, as ``job_requeue`` does for the portal's engine."""
    return {
        "admitted_at": None,
        "started_at": None,
        "borrowing": False,
        "evictions": job.evictions + 1,
        "earlier_runs": runs_ended(job, now),
    }


# What a released job no longer holds.
_RELEASED: dict[str, Any] = {
    "admitted_at": None,
    "applied_at": None,
    "started_at": None,
    "evicted_at": None,
    "borrowing": False,
    "placement": {},
    "advice": "",
}


@in_job_cluster
def job_evict(*, job_id: int) -> EvictOutcome:
    """1. Re-read the job: return unless it is an eviction under way.
    2. Delete its objects (background propagation: the pods follow).
    3. While any object or pod remains, return ``STOPPING`` (the task tries again).
    4. Release it: no longer admitted or applied, back in its team's queue at its
       original place (its submission time), with its eviction on the timeline; the run
       it ended is kept in ``earlier_runs`` for the GPU-hour accounting. A workspace being
       stopped (``stop_requested_at``) moves to ``stopped`` instead: out of the queue,
       its home claim kept, until its owner starts it again.
    """
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.state != JobState.QUEUED or job.evicted_at is None:
        return EvictOutcome.NOT_DUE
    for manifest in reversed(job.manifests):
        meta = manifest["metadata"]
        kube.delete(manifest["kind"], meta["name"], meta.get("namespace"))
    if _remaining(job):
        return EvictOutcome.STOPPING
    runs = runs_ended(job, timezone.now())
    if job.stop_requested_at is not None:
        stopped = job_transition(
            job=job,
            where={"state": JobState.QUEUED, "evicted_at": job.evicted_at},
            changes={
                **_RELEASED,
                "earlier_runs": runs,
                "state": JobState.STOPPED,
                "stop_requested_at": None,
                "reason": job.stop_reason or "Stopped",
                "message": _stopped_message(job.stop_message or "Stopped."),
            },
            event_reason="Stopped",
            event_message="Its pod is gone and its quota is free; the home folder is kept.",
        )
        return EvictOutcome.STOPPED if stopped else EvictOutcome.NOT_DUE
    released = job_transition(
        job=job,
        where={"state": JobState.QUEUED, "evicted_at": job.evicted_at},
        changes={**_RELEASED, "earlier_runs": runs},
        event_reason="Requeued",
        event_message="Its objects are gone from the cluster; back in the queue at its place "
        f"(submitted {timezone.localtime(job.created_at):%Y-%m-%d %H:%M}).",
    )
    return EvictOutcome.REQUEUED if released else EvictOutcome.NOT_DUE


def _stopped_message(why: str) -> str:
    """A stopped workspace's message: why it was stopped (by whom, or by which rule), then
    where it stands."""
    return (
        f"{why} Its pod is gone and its GPUs are free; the home folder is kept. "
        "Start it again to resume."
    )
