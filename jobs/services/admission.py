"""Admission's locks and writes: one pass over a cohort (``admission_run``) takes the locks,
reads its snapshot, lets ``jobs.admission.decisions`` decide, and writes what it decided:
admitted jobs, which of the cohort's jobs run on borrowed quota, the victims sent back to
the queue, and why each blocked queue waits (in ``jobs.admission.words``' sentences).

Race-free: a pass holds the row locks of every team of the cohort (taken in id order, the
same order everywhere, so two passes never deadlock) and then their quota rows, so one
pass per cohort runs at a time; usage is recomputed from committed rows under the locks.
The SQL a pass sends grows with the number of teams and of jobs it admits or evicts, not
with the length of the queue.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from cluster.models import Cluster
from cluster.services import clusters_tracked
from jobs.admission.decisions import (
    AdmissionPass,
    QueuedJob,
    admission_read,
    admit,
    borrowing_ids,
    holders,
    preempt,
    queued,
)
from jobs.admission.words import ADMITTED_MESSAGE, BORROWING_MESSAGE, eviction_words
from jobs.models import ACTIVE_STATES, QUEUE_ORDER_SQL, Job, JobEvent, JobState, queue_key
from jobs.services.eviction import job_requeue
from jobs.services.timeline import timeline_add_many
from scheduling.sharing import Fit, FitKind


@dataclass
class AdmissionResult:
    admitted: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  # first job of a team → reason
    evicted: list[int] = field(default_factory=list)


def admission_run(*, team_id: int) -> AdmissionResult:
    """An admission pass over the cohort of ``team_id`` (or the team alone) on each cluster
    not disabled (a team's quota is per cluster): ``admission_pass``."""
    result = AdmissionResult()
    for cluster in clusters_tracked():
        done = admission_pass(team_id=team_id, cluster=cluster)
        result.admitted += done.admitted
        result.waiting.update(done.waiting)
        result.evicted += done.evicted
    return result


def admission_pass(*, team_id: int, cluster: Cluster) -> AdmissionResult:
    """One admission pass over the cohort of ``team_id`` (or the team alone) on one
    cluster: its jobs placed there, against their teams' quotas there.

    1. Lock the cohort's team rows in id order, then their quota rows; read what admitted
       jobs hold and every queued job, in queue order.
    2. Admit: while some team's first queued job fits, admit the one ``next_head`` ranks
       first and count it in the snapshot before the next decision. A first job that does
       not fit blocks its team for the rest of the pass.
    3. Preempt: for each blocked first job (highest priority, then oldest, first) that
       would fit on nominal quota once evictions already under way finish, wait for them;
       else choose the fewest victims (``preemption_victims``) and evict them.
    4. Write: admitted jobs (and which of the cohort's jobs now run on borrowed quota),
       victims, and why each blocked queue waits.
       The same borrowing flags for the cohort's jobs Kueue admitted (Kueue mode).
    """
    result = AdmissionResult()
    with transaction.atomic():
        state = admission_read(team_id, cluster=cluster)
        if state is None:
            return result
        now = timezone.now()
        admitted = admit(state)
        result.admitted = [job.job_id for job, _ in admitted]
        blocked = {tid: head for tid in state.queues if (head := state.head(tid)) is not None}
        evictions, reasons = preempt(state, blocked)
        _write_admitted(state, admitted, now)
        _write_borrowing(state)
        _write_evictions(state, evictions, now, result)
        _write_waiting(state, reasons, result)
        _write_kueue_borrowing(state)
    return result


def _write_kueue_borrowing(state: AdmissionPass) -> None:
    """Which of the cohort's jobs that Kueue admitted run on borrowed quota: the portal
    engine's rule (in admission order, each job taking its team above nominal), on the
    quota rows the pass read, which Kueue's ClusterQueues are written from (managed mode)."""
    if state.cohort_name is None:
        return
    kueue_holders = holders(list(state.teams), Job.Queueing.KUEUE, state.cluster)
    if kueue_holders:
        _write_borrowing(replace(state, holders=kueue_holders))


def _write_admitted(
    state: AdmissionPass, admitted: list[tuple[QueuedJob, Fit]], now: datetime
) -> None:
    for borrowing in (False, True):
        ids = [job.job_id for job, fit in admitted if (fit.kind is FitKind.BORROWING) == borrowing]
        if not ids:
            continue
        message = (
            BORROWING_MESSAGE.format(cohort=state.cohort_name) if borrowing else ADMITTED_MESSAGE
        )
        # Conditional: a job cancelled since the queue was read stays cancelled.
        Job.objects.filter(pk__in=ids, state=JobState.QUEUED, admitted_at__isnull=True).update(
            admitted_at=now, reason="Admitted", message=message, updated_at=now
        )
        moved = list(Job.objects.filter(pk__in=ids, admitted_at=now).values_list("pk", flat=True))
        timeline_add_many(JobEvent(job_id=pk, reason="Admitted", message=message) for pk in moved)
        state.holders.extend(
            {
                "pk": job.job_id,
                "team_id": job.team_id,
                "demand": job.demand,
                "priority_value": job.priority,
                "admitted_at": now,
                "borrowing": False,
                "evicting": False,
            }
            for job, fit in admitted
            if job.job_id in moved
        )


def _write_borrowing(state: AdmissionPass) -> None:
    """Keep ``Job.borrowing`` true exactly while a job runs on borrowed quota."""
    borrowing = borrowing_ids(state)
    holders = {h["pk"]: h for h in state.holders}
    on = [pk for pk in borrowing if not holders[pk]["borrowing"]]
    off = [pk for pk, h in holders.items() if h["borrowing"] and pk not in borrowing]
    for ids, value in ((on, True), (off, False)):
        if ids:
            Job.objects.filter(pk__in=ids).update(borrowing=value)


def _write_evictions(
    state: AdmissionPass,
    victims: list[tuple[dict[str, Any], QueuedJob]],
    now: datetime,
    result: AdmissionResult,
) -> None:
    """Move each victim back to the queue (reason ``Preempted``) and queue the deletion of
    its objects; its quota stays counted until they are gone (``jobs.services.eviction``)."""
    if not victims:
        return
    slugs = {tid: t.slug for tid, t in state.teams.items()}
    victim_ids = [holder["pk"] for holder, _ in victims]
    rows = Job.objects.in_bulk(victim_ids)
    # What each preemptor takes back from each team: the sum of its victims' holdings.
    taken: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for holder, preemptor in victims:
        for resource, amount in holder["demand"].items():
            taken[(preemptor.job_id, holder["team_id"])][resource] += int(amount)
    # Where each victim goes back in its team's queue: behind the queued jobs ahead of it
    # and the other jobs evicted now that are ahead of it.
    evicted_keys: dict[int, list[tuple[int, datetime, int]]] = defaultdict(list)
    for pk in victim_ids:
        if pk in rows:
            evicted_keys[rows[pk].team_id].append(_key(rows[pk]))
    for holder, preemptor in victims:
        job = rows.get(holder["pk"])
        if job is None:
            continue
        position = (
            1
            + queued([job.team_id], cluster=state.cluster).ahead_of(*_place(job)).count()
            + sum(1 for other in evicted_keys[job.team_id] if other < _key(job))
        )
        message = eviction_words(
            state.cohort,
            victim_team=slugs[holder["team_id"]],
            preemptor=state.as_head(preemptor),
            taken=taken[(preemptor.job_id, holder["team_id"])],
            at=now,
            position=position,
        )
        moved = job_requeue(
            job=job,
            reason="Preempted",
            message=message,
            where={
                "state__in": ACTIVE_STATES,
                "admitted_at__isnull": False,
                "evicted_at__isnull": True,
            },
            enqueue=False,
        )
        if moved:
            result.evicted.append(job.pk)  # the task queues the deletion of its objects


def _place(job: Job) -> tuple[int, datetime, int]:
    return job.priority_value, job.created_at, job.pk


def _key(job: Job) -> tuple[int, datetime, int]:
    return queue_key(*_place(job))


# (QUEUE_ORDER_SQL is a constant of jobs.models: nothing of a request reaches this text.)
_WAITING_SQL = f"""
UPDATE jobs_job SET reason = %s, message = ranked.message, updated_at = %s
FROM (
    SELECT id, %s || '; ' || (row_number() OVER w - 1) ||
           CASE WHEN row_number() OVER w = 2 THEN ' job ahead' ELSE ' jobs ahead' END AS message
    FROM jobs_job
    WHERE team_id = %s AND state = 'queued' AND admitted_at IS NULL
      AND (%s OR cluster_id = %s OR (%s AND cluster_id IS NULL))
    WINDOW w AS (ORDER BY {QUEUE_ORDER_SQL})
) AS ranked
WHERE jobs_job.id = ranked.id AND jobs_job.reason <> 'Preempted'
  AND (jobs_job.reason <> %s OR jobs_job.message <> ranked.message)
"""  # noqa: S608


def _write_waiting(state: AdmissionPass, reasons: dict[int, str], result: AdmissionResult) -> None:
    """Each blocked queue's reason on all its jobs, with how many jobs are ahead of each:
    one statement per team, rewriting only the rows whose words changed (an evicted job
    keeps its ``Preempted`` words until it is admitted again)."""
    now = timezone.now()
    # The queue of the pass's cluster (every cluster's with none).
    where = state.cluster
    on_cluster = [where is None, where.pk if where else None, where.is_first if where else False]
    for tid, words in reasons.items():
        head = state.queues[tid][0]
        result.waiting[head.job_id] = words
        reason = "QuotaExceeded"
        with connection.cursor() as cursor:
            cursor.execute(_WAITING_SQL, [reason, now, words, tid, *on_cluster, reason])
