"""Where a queued job stands: its place in the team's queue and when it may start.

The rules of the estimate (which jobs are ahead, what frees when running jobs reach their
deadlines) are read from job rows; in Kueue mode the team's place and the jobs ahead of it
are asked of Kueue's visibility API (one request per look at a queued job, whatever the
number of jobs).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from cluster import kube
from jobs.cluster_scope import in_job_cluster
from jobs.models import ACTIVE_STATES, Job, JobQuerySet, JobState
from scheduling.quantity import quota_base
from teams.models import GpuQuota


@dataclass(frozen=True)
class QueuePosition:
    """Where a queued job stands, and a rough guess of when it may start."""

    team: int  # 1-based, within the team's queue (the order admission walks)
    cluster: int  # 1-based, among every team's queued jobs
    blocking_resource: str | None  # the quota resource the queue waits for; None: none
    estimated_start: datetime | None
    estimate: str  # the estimate in words, honest about what is unknown


NO_DEADLINE = "unknown: running jobs have no deadline"

logger = logging.getLogger(__name__)


def _sum_demands(demands: Iterable[dict[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for demand in demands:
        for resource, amount in demand.items():
            totals[resource] += int(amount)
    return dict(totals)


def _deadline(job: Job) -> datetime | None:
    seconds = (job.spec or {}).get("max_runtime_seconds")
    if job.started_at is None or not seconds:
        return None
    return job.started_at + timedelta(seconds=int(seconds))


def _start_estimate(job: Job, ahead: list[Job]) -> tuple[str | None, datetime | None, str]:
    """(blocking resource, estimated start, estimate in words) for a queued job.

    1. Admission is strict FIFO within priority: the job starts once its own demand
       *and* the demand of every job ahead of it fit the team's quotas.
    2. For each quota that is short, only running jobs with ``max_runtime_seconds``
       will free it at a known time (``started_at + max_runtime_seconds``, when
       the Job's activeDeadlineSeconds stops them); walk those deadlines in order
       until enough is freed.
    3. The latest of those times is the estimate; a short quota that deadlines
       cannot free makes the estimate unknown. Jobs often finish earlier: it is
       a "no later than, if the deadlines hold" guess, not a promise.
    """
    # The team's quota and holders on the job's cluster (a team's quota is per cluster).
    limits = {
        q.resource: quota_base(q.resource, q.limit)
        for q in GpuQuota.objects.filter(team_id=job.team_id).of(job.cluster)
    }
    holders = list(
        _same_cluster(Job.objects, job)
        .filter(team_id=job.team_id, state__in=ACTIVE_STATES, admitted_at__isnull=False)
        .only("state", "demand", "spec", "started_at")
    )
    used = _sum_demands(h.demand for h in holders)
    wanted = _sum_demands([*(j.demand for j in ahead), job.demand])
    short = {
        resource: used.get(resource, 0) + amount - limits[resource]
        for resource, amount in wanted.items()
        if resource in limits and used.get(resource, 0) + amount > limits[resource]
    }
    if not short:
        return None, None, "the team's quota has room: waiting for admission to run"
    # Same order as admission's check, so the named resource matches the job's reason.
    blocking = next(r for r in wanted if r in short)
    latest: datetime | None = None
    for resource, missing in short.items():
        freed, when = 0, None
        releases = sorted(
            (deadline, int(h.demand.get(resource, 0)))
            for h in holders
            if h.state == JobState.RUNNING
            and int(h.demand.get(resource, 0)) > 0
            and (deadline := _deadline(h)) is not None
        )
        for deadline, amount in releases:
            freed += amount
            if freed >= missing:
                when = deadline
                break
        if when is None:
            return blocking, None, NO_DEADLINE
        latest = when if latest is None else max(latest, when)
    assert latest is not None
    latest = max(latest, timezone.now())
    return (
        blocking,
        latest,
        f"at the latest when running jobs holding {blocking} reach their max runtime "
        "(they may finish sooner)",
    )


def _same_cluster(jobs: Any, job: Job) -> JobQuerySet:
    """The jobs on ``job``'s cluster: its queue and its quota are that cluster's."""
    cluster = job.cluster
    first = cluster is None or cluster.is_first
    found: JobQuerySet = jobs.on_cluster(job.cluster_id, first=first)
    return found


@dataclass(frozen=True)
class _KueueQueue:
    place: int  # 1-based, in the job's ClusterQueue
    ahead: list[str]  # the Workloads Kueue will consider before the job's, in its team


def _kueue_queue(job: Job) -> _KueueQueue | None:
    """Kueue mode: the job's place in its ClusterQueue and the Workloads ahead of it in its
    LocalQueue, as Kueue's visibility API gives them; None when Kueue does not list it (not
    pending there yet) or cannot be asked (the portal's own order stands in, and the page
    says nothing false)."""
    names = (job.placement or {}).get("kueue") or {}
    if not names.get("local_queue"):
        return None
    try:
        pending = kube.pending_workloads(job.namespace, names["local_queue"])
    except kube.ClusterError as exc:
        logger.warning("job %s: Kueue's queue position not read: %s", job.pk, exc)
        return None
    for index, item in enumerate(pending):
        if item["metadata"]["name"] == names.get("workload"):
            return _KueueQueue(
                place=int(item.get("positionInClusterQueue", 0)) + 1,
                ahead=[ahead["metadata"]["name"] for ahead in pending[:index]],
            )
    return None


@in_job_cluster
def job_queue_position(*, job: Job) -> QueuePosition | None:
    """Position of a queued, not yet admitted job in its team's queue and cluster-wide,
    with a rough start estimate; None for any other job. In Kueue mode the team's place,
    and the jobs the estimate counts ahead of it, are Kueue's (its visibility API); the
    rest is the portal's estimate on its own rows."""
    if job.state != JobState.QUEUED or job.admitted_at is not None:
        return None
    queued = _same_cluster(Job.objects, job).waiting_for_admission()
    in_team = queued.filter(team_id=job.team_id).only("pk", "demand")
    place = (job.priority_value, job.created_at, job.pk)
    kueue = _kueue_queue(job) if job.queueing == Job.Queueing.KUEUE else None
    if kueue is None:
        ahead_in_team = list(in_team.ahead_of(*place))
    else:
        ahead_in_team = list(in_team.filter(placement__kueue__workload__in=kueue.ahead))
    cluster = queued.ahead_of(*place).count() + 1
    blocking, estimated_start, estimate = _start_estimate(job, ahead_in_team)
    return QueuePosition(
        team=kueue.place if kueue else len(ahead_in_team) + 1,
        cluster=cluster,
        blocking_resource=blocking,
        estimated_start=estimated_start,
        estimate=estimate,
    )
