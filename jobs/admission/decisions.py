"""What admission decides, read from the rows and written nowhere: the pass's snapshot of a
cohort (``admission_read``), which queued jobs it admits (``admit``), whom it evicts and why
the others wait (``preempt``), and what it would do with a job submitted now
(``admission_preview``).

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
- Inference deployments and workspaces borrow only when their team allows it.

A pass is over one cluster: a team's quota is per cluster (as Kueue's ClusterQueues are), so
its jobs placed on one cluster are admitted against its quota there and hold nothing on
another. ``cluster=None`` reads every cluster's rows together (one cluster: the same).

The locks and the writes are ``jobs.services.admission``'s; selectors (the fit preview, the
Kueue words) read through this module.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from cluster.models import Cluster
from cluster.priority_classes import may_preempt_own_team
from jobs.admission.words import evicting_words, wait_words, waiting_for_evictions_words
from jobs.models import ACTIVE_STATES, Job, JobQuerySet, queue_key
from jobs.quota import kind_may_borrow
from scheduling.quantity import quota_base, quota_words
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
)
from teams.models import GpuQuota, Team


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

_QUEUE_FIELDS = ("pk", "team_id", "kind", "priority_value", "created_at", "demand")


def on(rows: Any, cluster: Cluster | None) -> Any:
    """The rows (jobs or quotas) of one cluster; all of them with ``None``."""
    return rows if cluster is None else rows.on_cluster(cluster.pk, first=cluster.is_first)


def queued(
    team_ids: list[int], queueing: str = Job.Queueing.PORTAL, cluster: Cluster | None = None
) -> JobQuerySet:
    """The teams' jobs waiting for one engine to admit them (on one cluster), in queue
    order (a pass admits only its own: Kueue admits the others, in the cluster)."""
    found: JobQuerySet = on(Job.objects.filter(team__in=team_ids), cluster)
    return found.waiting_for_admission(queueing)


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
    cluster: Cluster | None = None  # where (None: every cluster's together)

    def head(self, team_id: int) -> QueuedJob | None:
        """The team's first queued job not yet admitted in this pass (reading the next
        page of its queue when the one read is used up)."""
        queue = self.queues[team_id]
        if not queue and team_id in self.more:
            last = self.more.pop(team_id)
            rows = list(
                queued([team_id], self.queueing, self.cluster)
                .behind(last.priority, last.created_at, last.job_id)
                .values_list(*_QUEUE_FIELDS)[: QUEUE_PAGE + 1]
            )
            queue.extend(QueuedJob(*row) for row in rows[:QUEUE_PAGE])
            if len(rows) > QUEUE_PAGE:
                self.more[team_id] = queue[-1]
        return queue[0] if queue else None

    def wait_words(self, team_id: int, job: QueuedJob) -> str:
        """Why ``job``, first of its team's queue, waits."""
        return wait_words(
            self.cohort,
            cohort_name=self.cohort_name,
            team=self.teams[team_id].slug,
            kind=job.kind,
            demand=job.demand,
        )

    def as_head(self, job: QueuedJob) -> Head:
        return Head(
            self.teams[job.team_id].slug, job.job_id, job.priority, job.created_at, job.demand
        )

    def may_borrow(self, job: QueuedJob) -> bool:
        return kind_may_borrow(self.teams[job.team_id], job.kind)


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
    teams: list[Team],
    *,
    lock: bool = True,
    queueing: str = Job.Queueing.PORTAL,
    cluster: Cluster | None = None,
) -> tuple[Cohort, list[dict[str, Any]]]:
    """The cohort's quotas on the cluster (locked unless only previewing) and what the jobs
    one engine admitted there hold."""
    in_cohort = teams[0].cohort_id is not None
    quotas: dict[int, dict[str, ResourceQuota]] = defaultdict(dict)
    rows: QuerySet[GpuQuota] = on(
        GpuQuota.objects.filter(team__in=[t.pk for t in teams]), cluster
    ).order_by("team_id", "resource")
    for q in rows.select_for_update() if lock else rows:
        base = quota_base(q.resource, 1)
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
    found = holders([t.pk for t in teams], queueing, cluster)
    usage: dict[int, dict[str, int]] = {t.pk: defaultdict(int) for t in teams}
    for job in found:
        for resource, amount in job["demand"].items():
            usage[job["team_id"]][resource] += int(amount)
    cohort = Cohort(
        {
            t.slug: TeamShare(quotas[t.pk], usage[t.pk], float(t.weight) if in_cohort else 1.0)
            for t in teams
        }
    )
    return cohort, found


def holders(
    team_ids: list[int], queueing: str, cluster: Cluster | None = None
) -> list[dict[str, Any]]:
    """The admitted, unfinished jobs of one engine (on one cluster), in admission order."""
    return [
        {**row, "evicting": row["evicted_at"] is not None}
        for row in on(Job.objects, cluster)
        .filter(
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
    cluster: Cluster | None = None,
) -> AdmissionPass | None:
    """The pass's snapshot: the cohort's teams (locked), quotas, holders, and the first
    ``page`` jobs of each team's queue (one statement: a window over the queue order), or
    every queued job with ``page=None``; of the portal's engine unless ``queueing`` says
    Kueue's (read-only: to explain what Kueue does in the same words)."""
    teams = _lock_teams(team_id, lock=lock)
    if not teams:
        return None
    cohort, found = _snapshot(teams, lock=lock, queueing=queueing, cluster=cluster)
    queues: dict[int, deque[QueuedJob]] = {t.pk: deque() for t in teams}
    rows = queued([t.pk for t in teams], queueing, cluster)
    if page is not None:
        rows = rows.first_of_each_team(page + 1)
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
        holders=found,
        queues=queues,
        more=more,
        queueing=queueing,
        cluster=cluster,
    )


def admit(state: AdmissionPass) -> list[tuple[QueuedJob, Fit]]:
    """While some team's first queued job fits, admit the one ``next_head`` ranks first and
    count it in the snapshot before the next decision. A first job that does not fit blocks
    its team for the rest of the pass."""
    admitted: list[tuple[QueuedJob, Fit]] = []
    blocked: set[int] = set()
    while True:
        heads: dict[int, Head] = {}
        for tid in state.queues:
            job = None if tid in blocked else state.head(tid)
            if job is None:
                continue
            fit = state.cohort.fit(state.teams[tid].slug, job.demand)
            if fit.kind is FitKind.NO or (
                fit.kind is FitKind.BORROWING and not state.may_borrow(job)
            ):
                blocked.add(tid)
                continue
            heads[tid] = state.as_head(job)
        chosen = next_head(state.cohort, heads.values())
        if chosen is None:
            return admitted
        head, fit = chosen
        tid = next(t for t, h in heads.items() if h is head)
        job = state.queues[tid].popleft()
        state.cohort.add(head.team, job.demand)
        admitted.append((job, fit))


def preempt(
    state: AdmissionPass, blocked: dict[int, QueuedJob]
) -> tuple[list[tuple[dict[str, Any], QueuedJob]], dict[int, str]]:
    """For each blocked first job (highest priority, then oldest, first): wait for the
    evictions under way when it fits once they finish; else the fewest victims
    (``preemption_victims``). Returns the victims (holder row, preemptor) and, per blocked
    team, why its queue waits."""
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
        blocked.items(), key=lambda item: queue_key(item[1].priority, item[1].created_at, 0)
    ):
        team = state.teams[tid]
        if evicting and settled.fit(team.slug, job.demand).kind is FitKind.NOMINAL:
            settled.add(team.slug, job.demand)
            reasons[tid] = waiting_for_evictions_words(len(evicting))
            continue
        found = preemption_victims(
            settled,
            team=team.slug,
            demand=job.demand,
            candidates=candidates(
                state.holders, slugs, team_id=tid, priority=job.priority, exclude=chosen
            ),
        )
        if found:
            by_id = {h["pk"]: h for h in state.holders}
            for victim in found:
                settled.remove(victim.team, victim.demand)
                chosen.add(victim.job_id)
                victims.append((by_id[victim.job_id], job))
            settled.add(team.slug, job.demand)
            reasons[tid] = evicting_words([v.job_id for v in found])
            continue
        reasons[tid] = state.wait_words(tid, job)
    return victims, reasons


def candidates(
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
            or (may_preempt_own_team(priority) and h["priority_value"] < priority)
        )
    ]


def borrowing_ids(state: AdmissionPass) -> set[int]:
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


@dataclass(frozen=True)
class QuotaVerdict:
    """What admission would do with a job submitted now (the "will it fit?" preview)."""

    kind: str  # nominal | borrowing | preempts | waits
    message: str
    victims: tuple[int, ...] = ()
    ahead: int = 0  # the team's queued jobs that go first (same or higher priority)


def admission_preview(
    *,
    team_id: int,
    kind: str,
    priority: int,
    demand: dict[str, int],
    cluster: Cluster | None = None,
) -> QuotaVerdict:
    """Would a job of this kind, priority and demand be admitted now on the cluster, by
    borrowing, by evicting, or wait? Read-only: takes no lock and changes nothing. It queues
    behind the team's queued jobs there of the same or higher priority, which go first."""
    state = admission_read(
        team_id, lock=False, page=None, queueing=settings.QUEUEING, cluster=cluster
    )
    assert state is not None, "the team exists: the spec check found it"
    team, cohort = state.teams[team_id], state.cohort
    job = QueuedJob(0, team_id, kind, priority, timezone.now(), demand)
    ahead = [q for q in state.queues[team_id] if q.priority >= priority]
    for position, waiting in enumerate(ahead):
        fit = cohort.fit(team.slug, waiting.demand)
        if fit.kind is FitKind.NO or (
            fit.kind is FitKind.BORROWING and not state.may_borrow(waiting)
        ):
            count = len(ahead) - position
            return QuotaVerdict(
                "waits",
                f"Waits for quota: {count} job{'s' if count != 1 else ''} of team "
                f"{team.slug} queued ahead of it wait{'s' if count == 1 else ''} first "
                f"({state.wait_words(team_id, waiting)}).",
                ahead=len(ahead),
            )
        cohort.add(team.slug, waiting.demand)
    fit = cohort.fit(team.slug, demand)
    if fit.kind is FitKind.NOMINAL:
        return QuotaVerdict("nominal", f"Fits team {team.slug}'s nominal quota.")
    if fit.kind is FitKind.BORROWING and state.may_borrow(job):
        borrowed = ", ".join(f"{quota_words(r, a)} {r}" for r, a in sorted(fit.borrowed.items()))
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
        candidates=candidates(
            state.holders, slugs, team_id=team_id, priority=priority, exclude=evicting
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
        return QuotaVerdict("preempts", message, tuple(v.job_id for v in victims))
    for holder in state.holders:
        if holder["pk"] in evicting:
            cohort.add(slugs[holder["team_id"]], holder["demand"])
    return QuotaVerdict(
        "waits", f"Waits for quota: {state.wait_words(team_id, job)}.", ahead=len(ahead)
    )
