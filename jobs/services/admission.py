"""Admission: turn queued jobs into admitted ones while quota allows, borrowing what the
team's cohort leaves idle, and evicting to give lenders their quota back.

The rules (Kueue's, ``docs/sharing.md``; the arithmetic is ``scheduling.sharing``):

- Within a team, jobs go in priority order, then first come. The first job that does not
  fit blocks the team's queue (StrictFIFO: a big job is never starved by small ones
  behind it), whether it waits for nominal quota or to borrow.
- Across the teams of a cohort, each team's first job competes: jobs that fit on nominal
  quota first, then borrowers by lowest weighted share after admission, then priority,
  then age. A blocked first job reserves nothing: the idle quota it cannot use is lent
  (Kueue's #4809 trap avoided), and if that quota is its own it gets it back by reclaim.
- A first job that would fit on its team's *nominal* quota, were borrowed quota returned
  (or, for a preempting PriorityClass, were lower-priority jobs of its own team stopped),
  evicts the fewest such jobs. Victims go back to the queue at their original place; the
  preemptor is admitted by the pass that follows their objects' deletion. Only a job
  within nominal preempts and only borrowed quota (or lower priority) is taken, so a
  preemptor can never be a victim of the job it evicted: no ping-pong.
- Inference deployments borrow only when their team allows it.

Race-free: a pass holds the row locks of every team of the cohort (taken in id order, the
same order everywhere, so two passes never deadlock) and then their quota rows, so one
pass per cohort runs at a time; usage is recomputed from committed rows under the locks.
The SQL a pass sends grows with the number of teams and of jobs it admits or evicts, not
with the length of the queue.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from cluster.priority_classes import PRIORITY_CLASS_VALUES
from jobs.models import ACTIVE_STATES, Job, JobEvent, JobState
from jobs.quota import format_amount, kind_may_borrow, quota_capacity
from jobs.services.timeline import timeline_add_many
from jobs.services.transitions import job_transition
from scheduling.sharing import (
    Cohort,
    Fit,
    FitKind,
    Head,
    ResourceQuota,
    Running,
    TeamShare,
    next_head,
    preemption_victims,
    wait_reason,
)
from teams.models import GpuQuota, Team

ADMITTED_MESSAGE = "Admitted against the team's quota; waiting to be applied."
BORROWING_MESSAGE = (
    "Admitted on quota borrowed from cohort {cohort}; waiting to be applied. It may be "
    "evicted and re-queued if a lending team needs its GPUs back."
)
# gpu-low's preemptionPolicy is Never: it waits instead of evicting its own team's jobs.
_MAY_PREEMPT_ABOVE = PRIORITY_CLASS_VALUES["low"]


@dataclass
class AdmissionResult:
    admitted: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  # first job of a team → reason
    evicted: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class QueuedJob:
    job_id: int
    team_id: int
    kind: str
    priority: int
    created_at: datetime
    demand: dict[str, int]


# How much of each team's queue a pass reads at a time: a pass admits a few jobs per team
# (quota is the limit), so reading 10,000 queued rows to admit 20 of them is waste.
QUEUE_PAGE = 50

_QUEUE_ORDER = ("-priority_value", "created_at", "pk")
_QUEUE_FIELDS = ("pk", "team_id", "kind", "priority_value", "created_at", "demand")


def _queued(team_ids: list[int], queueing: str = Job.Queueing.PORTAL) -> Any:
    """The teams' jobs waiting for one engine to admit them, in queue order (a pass admits
    only its own: Kueue admits the others, in the cluster)."""
    return Job.objects.filter(
        team__in=team_ids,
        state=JobState.QUEUED,
        admitted_at__isnull=True,
        queueing=queueing,
    ).order_by(*_QUEUE_ORDER)


def _after(job: QueuedJob) -> Q:
    """Queued jobs behind ``job`` in queue order."""
    same = Q(priority_value=job.priority)
    return (
        Q(priority_value__lt=job.priority)
        | (same & Q(created_at__gt=job.created_at))
        | (same & Q(created_at=job.created_at, pk__gt=job.job_id))
    )


@dataclass
class AdmissionPass:
    """What one pass reads under its locks."""

    teams: dict[int, Team]
    cohort: Cohort
    cohort_name: str | None
    holders: list[dict[str, Any]]  # admitted, unfinished jobs
    queues: dict[int, deque[QueuedJob]]  # the first jobs of each team's queue
    # Teams whose queue holds more than was read, and the last job read of each.
    more: dict[int, QueuedJob] = field(default_factory=dict)
    queueing: str = Job.Queueing.PORTAL  # whose admitted and queued jobs these are

    def head(self, team_id: int) -> QueuedJob | None:
        """The team's first queued job not yet admitted in this pass (reading the next
        page of its queue when the one read is used up)."""
        queue = self.queues[team_id]
        if not queue and team_id in self.more:
            last = self.more.pop(team_id)
            rows = list(
                _queued([team_id], self.queueing)
                .filter(_after(last))
                .values_list(*_QUEUE_FIELDS)[: QUEUE_PAGE + 1]
            )
            queue.extend(QueuedJob(*row) for row in rows[:QUEUE_PAGE])
            if len(rows) > QUEUE_PAGE:
                self.more[team_id] = queue[-1]
        return queue[0] if queue else None


def _lock_teams(team_id: int, *, lock: bool = True) -> list[Team]:
    """Lock every team of ``team_id``'s cohort (just it, without one), in id order."""
    while True:
        team = Team.objects.filter(pk=team_id).only("cohort_id").first()
        if team is None:
            return []
        members = Q(cohort_id=team.cohort_id) if team.cohort_id else Q(pk=team_id)
        found = Team.objects.filter(members).select_related("cohort").order_by("pk")
        teams = list(found.select_for_update(of=("self",)) if lock else found)
        # Moved to another cohort between the two reads: lock that cohort instead.
        if any(t.pk == team_id for t in teams):
            return teams


def _snapshot(
    teams: list[Team], *, lock: bool = True, queueing: str = Job.Queueing.PORTAL
) -> tuple[Cohort, list[dict[str, Any]]]:
    """The cohort's quotas (locked unless only previewing) and what the jobs one engine
    admitted hold."""
    in_cohort = teams[0].cohort_id is not None
    quotas: dict[int, dict[str, ResourceQuota]] = defaultdict(dict)
    rows = GpuQuota.objects.filter(team__in=[t.pk for t in teams]).order_by("team_id", "resource")
    for q in rows.select_for_update() if lock else rows:
        base = quota_capacity(q.resource, 1)
        quotas[q.team_id][q.resource] = ResourceQuota(
            nominal=q.limit * base,
            # Outside a cohort there is nothing to borrow from or lend to.
            borrowing_limit=q.borrowing_limit * base
            if in_cohort and q.borrowing_limit is not None
            else None,
            lending_limit=q.lending_limit * base
            if in_cohort and q.lending_limit is not None
            else None,
        )
    holders = _holders([t.pk for t in teams], queueing)
    usage: dict[int, dict[str, int]] = {t.pk: defaultdict(int) for t in teams}
    for job in holders:
        for resource, amount in job["demand"].items():
            usage[job["team_id"]][resource] += int(amount)
    cohort = Cohort(
        {
            t.slug: TeamShare(quotas[t.pk], usage[t.pk], float(t.weight) if in_cohort else 1.0)
            for t in teams
        }
    )
    return cohort, holders


def _holders(team_ids: list[int], queueing: str) -> list[dict[str, Any]]:
    """The admitted, unfinished jobs of one engine, in admission order."""
    return [
        {**row, "evicting": row["evicted_at"] is not None}
        for row in Job.objects.filter(
            team__in=team_ids,
            state__in=ACTIVE_STATES,
            admitted_at__isnull=False,
            # Kueue's jobs are Kueue's to evict: the engines never fight over a job.
            queueing=queueing,
        )
        .order_by("admitted_at", "pk")
        .values(
            "pk", "team_id", "demand", "priority_value", "admitted_at", "borrowing", "evicted_at"
        )
    ]


def admission_read(
    team_id: int,
    *,
    lock: bool = True,
    page: int | None = QUEUE_PAGE,
    queueing: str = Job.Queueing.PORTAL,
) -> AdmissionPass | None:
    """The pass's snapshot: the cohort's teams (locked), quotas, holders, and the first
    ``page`` jobs of each team's queue (one statement: a window over the queue order), or
    every queued job with ``page=None``; of the portal's engine unless ``queueing`` says
    Kueue's (read-only: to explain what Kueue does in the same words)."""
    teams = _lock_teams(team_id, lock=lock)
    if not teams:
        return None
    cohort, holders = _snapshot(teams, lock=lock, queueing=queueing)
    queues: dict[int, deque[QueuedJob]] = {t.pk: deque() for t in teams}
    rows = _queued([t.pk for t in teams], queueing)
    if page is not None:
        rows = rows.annotate(
            place=Window(
                RowNumber(),
                partition_by=[F("team_id")],
                order_by=[F("priority_value").desc(), F("created_at"), F("pk")],
            )
        ).filter(place__lte=page + 1)
    for row in rows.values_list(*_QUEUE_FIELDS).iterator(chunk_size=5000):
        queues[row[1]].append(QueuedJob(*row))
    more = {}
    if page is not None:
        for tid, queue in queues.items():
            if len(queue) > page:
                queue.pop()
                more[tid] = queue[-1]
    cohort_obj = teams[0].cohort
    return AdmissionPass(
        teams={t.pk: t for t in teams},
        cohort=cohort,
        cohort_name=cohort_obj.slug if cohort_obj is not None else None,
        holders=holders,
        queues=queues,
        more=more,
        queueing=queueing,
    )


def _amount(resource: str, value: int) -> str:
    return format_amount(resource, value)


def _may_borrow(team: Team, job: QueuedJob) -> bool:
    return kind_may_borrow(team, job.kind)


def _head(team: Team, job: QueuedJob) -> Head:
    return Head(team.slug, job.job_id, job.priority, job.created_at, job.demand)


def admission_run(*, team_id: int) -> AdmissionResult:
    """One admission pass over the cohort of ``team_id`` (or the team alone).

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
        state = admission_read(team_id)
        if state is None:
            return result
        now = timezone.now()
        admitted = _admit(state, result)
        blocked = {tid: head for tid in state.queues if (head := state.head(tid)) is not None}
        evictions, reasons = _preempt(state, blocked, now)
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
    holders = _holders(list(state.teams), Job.Queueing.KUEUE)
    if holders:
        _write_borrowing(replace(state, holders=holders))


def _admit(state: AdmissionPass, result: AdmissionResult) -> list[tuple[QueuedJob, Fit]]:
    admitted: list[tuple[QueuedJob, Fit]] = []
    blocked: set[int] = set()
    while True:
        heads: dict[int, Head] = {}
        for tid in state.queues:
            job = None if tid in blocked else state.head(tid)
            if job is None:
                continue
            team = state.teams[tid]
            fit = state.cohort.fit(team.slug, job.demand)
            if fit.kind is FitKind.NO or (
                fit.kind is FitKind.BORROWING and not _may_borrow(team, job)
            ):
                blocked.add(tid)
                continue
            heads[tid] = _head(team, job)
        chosen = next_head(state.cohort, heads.values())
        if chosen is None:
            return admitted
        head, fit = chosen
        tid = next(t for t, h in heads.items() if h is head)
        job = state.queues[tid].popleft()
        state.cohort.add(head.team, job.demand)
        admitted.append((job, fit))
        result.admitted.append(job.job_id)


def _preempt(
    state: AdmissionPass, blocked: dict[int, QueuedJob], now: datetime
) -> tuple[list[tuple[dict[str, Any], QueuedJob]], dict[int, str]]:
    """Victims (holder row, preemptor) and, per blocked team, why its queue waits."""
    # What the cohort will hold once the evictions under way have finished.
    settled = state.cohort.copy()
    slugs = {tid: t.slug for tid, t in state.teams.items()}
    evicting = [h for h in state.holders if h["evicting"]]
    for holder in evicting:
        settled.remove(slugs[holder["team_id"]], holder["demand"])
    chosen: set[int] = {h["pk"] for h in evicting}
    victims: list[tuple[dict[str, Any], QueuedJob]] = []
    reasons: dict[int, str] = {}
    for tid, job in sorted(
        blocked.items(), key=lambda item: (-item[1].priority, item[1].created_at)
    ):
        team = state.teams[tid]
        if evicting and settled.fit(team.slug, job.demand).kind is FitKind.NOMINAL:
            settled.add(team.slug, job.demand)
            reasons[tid] = (
                f"Waiting for {len(evicting)} evicted job{'s' if len(evicting) != 1 else ''} "
                "to stop; it is admitted as soon as their GPUs are free."
            )
            continue
        candidates = _candidates(
            state.holders, slugs, team_id=tid, priority=job.priority, exclude=chosen
        )
        found = preemption_victims(
            settled, team=team.slug, demand=job.demand, candidates=candidates
        )
        if found:
            by_id = {h["pk"]: h for h in state.holders}
            for victim in found:
                settled.remove(victim.team, victim.demand)
                chosen.add(victim.job_id)
                victims.append((by_id[victim.job_id], job))
            settled.add(team.slug, job.demand)
            reasons[tid] = (
                f"Evicting {len(found)} job{'s' if len(found) != 1 else ''} "
                f"({', '.join(f'#{v.job_id}' for v in found)}) to run it; it is admitted as "
                "soon as their GPUs are free."
            )
            continue
        reasons[tid] = wait_words(state, team, job)
    return victims, reasons


def _candidates(
    holders: list[dict[str, Any]],
    slugs: dict[int, str],
    *,
    team_id: int,
    priority: int,
    exclude: set[int],
) -> list[Running]:
    """Who a job of ``team_id`` at ``priority`` may evict: every admitted job of the other
    teams of its cohort, whatever its priority (Kueue's ``reclaimWithinCohort: Any``;
    ``preemption_victims`` takes one only while its team is over its nominal quota on the
    contested resource, so a team is reclaimed from its lowest-priority job, not from the
    one that happens to be flagged borrowing), and its own team's lower-priority jobs
    unless its PriorityClass never preempts (``gpu-low``)."""
    return [
        Running(slugs[h["team_id"]], h["pk"], h["priority_value"], h["admitted_at"], h["demand"])
        for h in holders
        if h["pk"] not in exclude
        and (
            h["team_id"] != team_id
            or (priority > _MAY_PREEMPT_ABOVE and h["priority_value"] < priority)
        )
    ]


def wait_words(state: AdmissionPass, team: Team, job: QueuedJob) -> str:
    fit = state.cohort.fit(team.slug, job.demand)
    if fit.kind is FitKind.BORROWING:
        # It fits only by borrowing, which its kind may not do.
        resource = next(iter(sorted(fit.borrowed)))
        quota = state.cohort.quota(team.slug, resource)
        assert quota is not None
        used = state.cohort.usage(team.slug, resource)
        what = "workspaces" if job.kind == Job.Kind.WORKSPACE else "inference deployments"
        return (
            f"team {team.slug} uses {_amount(resource, used)} of "
            f"{_amount(resource, quota.nominal)} {resource} (nominal); {what} of "
            f"{team.slug} run on nominal quota only (a platform admin can let them borrow)"
        )
    words = wait_reason(
        state.cohort,
        team=team.slug,
        demand=job.demand,
        cohort_name=state.cohort_name,
        amount=_amount,
    )
    return words or "waiting for admission to run"


def _borrowing_ids(state: AdmissionPass) -> set[int]:
    """The admitted jobs that run on borrowed quota now: per team, in admission order, each
    job that takes the team's use of some resource above its nominal quota."""
    borrowing: set[int] = set()
    if state.cohort_name is None:
        return borrowing
    running: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    slugs = {tid: t.slug for tid, t in state.teams.items()}
    for holder in state.holders:
        used = running[holder["team_id"]]
        above = False
        for resource, amount in holder["demand"].items():
            used[resource] += int(amount)
            quota = state.cohort.quota(slugs[holder["team_id"]], resource)
            if quota is not None and used[resource] > quota.nominal:
                above = True
        if above:
            borrowing.add(holder["pk"])
    return borrowing


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
    borrowing = _borrowing_ids(state)
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
    evicted_keys: dict[int, list[tuple[int, datetime]]] = defaultdict(list)
    for pk in victim_ids:
        if pk in rows:
            evicted_keys[rows[pk].team_id].append((-rows[pk].priority_value, rows[pk].created_at))
    for holder, preemptor in victims:
        job = rows.get(holder["pk"])
        if job is None:
            continue
        key = (-job.priority_value, job.created_at)
        ahead = Q(priority_value__gt=job.priority_value) | Q(
            priority_value=job.priority_value, created_at__lt=job.created_at
        )
        position = (
            1
            + _queued([job.team_id]).filter(ahead).count()
            + sum(1 for other in evicted_keys[job.team_id] if other < key)
        )
        message = eviction_words(
            state,
            victim_team=slugs[holder["team_id"]],
            preemptor=preemptor,
            taken=taken[(preemptor.job_id, holder["team_id"])],
            at=now,
            position=position,
        )
        moved = job_transition(
            job=job,
            where={
                "state__in": ACTIVE_STATES,
                "admitted_at__isnull": False,
                "evicted_at__isnull": True,
            },
            changes={
                "state": JobState.QUEUED,
                "reason": "Preempted",
                "message": message,
                "evicted_at": now,
                "evictions": job.evictions + 1,
            },
            event_reason="Preempted",
            event_message=message,
            event_type="Warning",
        )
        if moved:
            result.evicted.append(job.pk)  # the task queues the deletion of its objects


def eviction_words(
    state: AdmissionPass,
    *,
    victim_team: str,
    preemptor: QueuedJob,
    taken: dict[str, int],
    at: datetime,
    position: int,
) -> str:
    """``evicted at 14:02: team robotics reclaimed 8 nvidia.com/gpu it had lent to vision;
    re-queued, position 3``: the resource is the first the preemptor needs (GPUs before
    cpu and memory), ``taken`` what this preemption takes back from the victim's team."""
    when = timezone.localtime(at).strftime("%H:%M")
    preemptor_team = state.teams[preemptor.team_id].slug
    contested = [
        r
        for r, a in preemptor.demand.items()
        if a and state.cohort.quota(preemptor_team, r) is not None and taken.get(r)
    ]
    resource = min(contested, key=lambda r: (r in ("cpu", "memory"), r), default=None)
    if victim_team == preemptor_team and resource is not None:
        what = f"{_amount(resource, preemptor.demand[resource])} {resource}"
    elif resource is not None:
        what = f"{_amount(resource, taken[resource])} {resource}"
    else:
        what = "its quota"
    if victim_team == preemptor_team:
        cause = (
            f"job #{preemptor.job_id} of priority {_priority_name(preemptor.priority)} needed "
            f"{what} of team {victim_team}'s quota"
        )
    else:
        cause = f"team {preemptor_team} reclaimed {what} it had lent to {victim_team}"
    return f"evicted at {when}: {cause}; re-queued, position {position}"


def _priority_name(value: int) -> str:
    return next((f"gpu-{n}" for n, v in PRIORITY_CLASS_VALUES.items() if v == value), str(value))


_WAITING_SQL = """
UPDATE jobs_job SET reason = %s, message = ranked.message, updated_at = %s
FROM (
    SELECT id, %s || '; ' || (row_number() OVER w - 1) ||
           CASE WHEN row_number() OVER w = 2 THEN ' job ahead' ELSE ' jobs ahead' END AS message
    FROM jobs_job
    WHERE team_id = %s AND state = 'queued' AND admitted_at IS NULL
    WINDOW w AS (ORDER BY priority_value DESC, created_at, id)
) AS ranked
WHERE jobs_job.id = ranked.id AND jobs_job.reason <> 'Preempted'
  AND (jobs_job.reason <> %s OR jobs_job.message <> ranked.message)
"""


def _write_waiting(state: AdmissionPass, reasons: dict[int, str], result: AdmissionResult) -> None:
    """Each blocked queue's reason on all its jobs, with how many jobs are ahead of each:
    one statement per team, rewriting only the rows whose words changed (an evicted job
    keeps its ``Preempted`` words until it is admitted again)."""
    now = timezone.now()
    for tid, words in reasons.items():
        head = state.queues[tid][0]
        result.waiting[head.job_id] = words
        reason = "QuotaExceeded"
        with connection.cursor() as cursor:
            cursor.execute(_WAITING_SQL, [reason, now, words, tid, reason])


@dataclass(frozen=True)
class QuotaVerdict:
    """What admission would do with a job submitted now (the "will it fit?" preview)."""

    kind: str  # nominal | borrowing | preempts | waits
    message: str
    victims: tuple[int, ...] = ()


def admission_preview(
    *, team_id: int, kind: str, priority: int, demand: dict[str, int]
) -> QuotaVerdict:
    """Would a job of this kind, priority and demand be admitted now, by borrowing, by
    evicting, or wait? Read-only: takes no lock and changes nothing. It queues behind the
    team's queued jobs of the same or higher priority, which go first."""
    state = admission_read(team_id, lock=False, page=None, queueing=settings.QUEUEING)
    assert state is not None, "the team exists: the spec check found it"
    team, cohort = state.teams[team_id], state.cohort
    job = QueuedJob(0, team_id, kind, priority, timezone.now(), demand)
    ahead = [q for q in state.queues[team_id] if q.priority >= priority]
    for position, queued in enumerate(ahead):
        fit = cohort.fit(team.slug, queued.demand)
        if fit.kind is FitKind.NO or (
            fit.kind is FitKind.BORROWING and not _may_borrow(team, queued)
        ):
            waiting = len(ahead) - position
            return QuotaVerdict(
                "waits",
                f"Waits for quota: {waiting} job{'s' if waiting != 1 else ''} of team "
                f"{team.slug} queued ahead of it wait{'s' if waiting == 1 else ''} first "
                f"({wait_words(state, team, queued)}).",
            )
        cohort.add(team.slug, queued.demand)
    fit = cohort.fit(team.slug, demand)
    if fit.kind is FitKind.NOMINAL:
        return QuotaVerdict("nominal", f"Fits team {team.slug}'s nominal quota.")
    if fit.kind is FitKind.BORROWING and _may_borrow(team, job):
        borrowed = ", ".join(f"{_amount(r, a)} {r}" for r, a in sorted(fit.borrowed.items()))
        return QuotaVerdict(
            "borrowing",
            f"Fits by borrowing {borrowed} from cohort {state.cohort_name}; it may be evicted "
            "and re-queued if a lending team needs its GPUs back.",
        )
    slugs = {tid: t.slug for tid, t in state.teams.items()}
    evicting = {h["pk"] for h in state.holders if h["evicting"]}
    for holder in state.holders:
        if holder["pk"] in evicting:
            cohort.remove(slugs[holder["team_id"]], holder["demand"])
    victims = preemption_victims(
        cohort,
        team=team.slug,
        demand=demand,
        candidates=_candidates(
            state.holders,
            slugs,
            team_id=team_id,
            priority=priority,
            exclude=evicting,
        ),
    )
    if victims:
        words = ", ".join(f"{v.team} #{v.job_id}" for v in victims)
        if all(v.team == team.slug for v in victims):
            message = (
                f"Fits on nominal quota by evicting team {team.slug}'s lower-priority jobs: "
                f"{words}; they are re-queued."
            )
        else:
            message = (
                f"Fits on team {team.slug}'s nominal quota by taking back what it lent: it "
                f"evicts {words}, running on borrowed quota; they are re-queued."
            )
        return QuotaVerdict(
            "preempts",
            message,
            tuple(v.job_id for v in victims),
        )
    for holder in state.holders:
        if holder["pk"] in evicting:
            cohort.add(slugs[holder["team_id"]], holder["demand"])
    return QuotaVerdict("waits", f"Waits for quota: {wait_words(state, team, job)}.")
