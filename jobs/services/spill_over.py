"""Spill-over: a job for ``any`` cluster still waiting for quota on the cluster it was
placed on, longer than its team's ``spill_over_minutes``, is moved once to another cluster
where it would start now, and its timeline says from where, to where and why.

- Portal engine only, and only a job not yet admitted: it has no objects in any cluster,
  so moving it is changing its row; admission then runs on the new cluster. (On Kueue a
  waiting job is in its cluster's queue already; MultiKueue is Kueue's way across.)
- Once: a job moved does not move again (no ping-pong when the first cluster frees).
- Only to a cluster where the fit preview says it starts now (on nominal or borrowed
  quota): a job that would wait there too stays where it is, first in its queue.
- A job that names its cluster never moves.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.utils import timezone

from cluster.models import Cluster
from cluster.services import cluster_first, on_cluster_row
from core.errors import ApplicationError
from jobs.models import QUEUE_ORDER, Job, JobState
from jobs.selectors.fit import FitPreview, job_fit_preview
from jobs.services.placement import ANY, clusters_for, job_place
from jobs.services.transitions import job_transition
from jobs.tasks import admission_enqueue

logger = logging.getLogger(__name__)

MOVED = "Moved"  # the timeline entry's reason: a job has it once


def jobs_spill_over(*, now: datetime | None = None) -> list[int]:
    """Move every job due to spill over (see the module); the ids moved."""
    now = now or timezone.now()
    if Cluster.objects.count() < 2:
        return []
    due = (
        Job.objects.filter(
            state=JobState.QUEUED,
            admitted_at__isnull=True,
            applied_at__isnull=True,
            queueing=Job.Queueing.PORTAL,
            team__spill_over_minutes__isnull=False,
            spec__cluster=ANY,
        )
        .exclude(events__reason=MOVED)
        .select_related("team", "cluster")
        .order_by(*QUEUE_ORDER)
    )
    moved: list[Job] = []
    for job in due:
        minutes = job.team.spill_over_minutes or 0
        if now - job.created_at < timedelta(minutes=minutes):
            continue
        if _move(job, now=now):
            moved.append(job)
    for team_id in sorted({job.team_id for job in moved}):
        admission_enqueue(team_id=team_id)
    return [job.pk for job in moved]


def _move(job: Job, *, now: datetime) -> bool:
    here = job.cluster or cluster_first()
    try:
        others = [c for c in clusters_for(ANY) if c.pk != here.pk]
    except ApplicationError:
        return False  # no cluster takes new work
    if not others:
        return False

    def preview(cluster: Cluster) -> FitPreview:
        return job_fit_preview(
            manifests=job.manifests,
            team=job.team,
            demand=job.demand,
            kind=job.kind,
            priority=job.priority_value,
            cluster=cluster,
        )

    try:
        placement = job_place(others, preview)
    except Exception:
        # A cluster that cannot be asked now: the job stays, and is looked at again.
        logger.exception("job %s: spill-over not decided", job.pk)
        return False
    fit = placement.fit
    if fit is None:  # one candidate, which job_place does not ask
        with on_cluster_row(placement.cluster.pk):
            fit = preview(placement.cluster)
    if fit.verdict != "fits":
        return False
    waited = int((now - job.created_at).total_seconds() // 60)
    words = f"{placement.cluster.name}: fits now" + (
        " on borrowed quota" if fit.quota == "borrowing" else ""
    )
    message = (
        f"Moved from {here.name} to {placement.cluster.name}: it waited {waited} min for "
        f"quota on {here.name}, past team {job.team.slug}'s spill-over time of "
        f"{job.team.spill_over_minutes} min ({words})."
    )
    return job_transition(
        job=job,
        where={"state": JobState.QUEUED, "admitted_at__isnull": True, "cluster": job.cluster},
        changes={"cluster": placement.cluster, "reason": MOVED, "message": message},
        event_reason=MOVED,
        event_message=message,
    )
