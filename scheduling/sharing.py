"""Quota sharing in a cohort, as Kueue computes it (``docs/sharing.md``): pure
functions over a snapshot, no database, no I/O.

Each team has, per quota resource, a *nominal* quota (guaranteed), an optional *borrowing
limit* (how much above nominal it may use from the cohort; None: no limit but the pool) and
an optional *lending limit* (how much of its nominal it lends; None: all of it). Borrowing
is per resource: ``nvidia.com/gpu`` only from other teams' ``nvidia.com/gpu`` quota, a
product only from the same product, a MIG profile only from the same profile.

In Kueue's terms, per resource r of a team t:

- ``guarded = nominal − lending_limit`` when a lending limit is set, else 0 (only t uses it);
- ``lendable = nominal − guarded``; the cohort's *pool* is the sum of every team's lendable;
- the pool's *usage* is the sum over teams of ``max(0, usage − guarded)``;
- what t can still take is ``max(0, guarded − usage) + min(pool − pool usage,
  lendable − max(0, usage − guarded) + borrowing_limit)``, the ``min`` only with a limit;
- the most t can ever hold is ``min(nominal + borrowing_limit, guarded + pool)``.

A team without a cohort is a cohort of one: its pool is its own lendable quota, so it can
never go above nominal.

The admission, the submit check, the explanations and the team pages all read these, so
they are computed in one place; ``tests/teams/test_sharing.py`` checks them on Kueue's
worked cases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

# A job's demand, or a team's usage: quota resource → amount in base units.
Amounts = Mapping[str, int]


@dataclass(frozen=True)
class ResourceQuota:
    """One quota row of a team: its nominal quota and the cohort's limits on it."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    def __post_init__(self) -> None:
        if self.nominal < 0:
            raise ValueError("nominal quota cannot be negative")
        if self.lending_limit is not None and not 0 <= self.lending_limit <= self.nominal:
            raise ValueError("the lending limit must be between 0 and the nominal quota")
        if self.borrowing_limit is not None and self.borrowing_limit < 0:
            raise ValueError("the borrowing limit cannot be negative")

    @property
    def guarded(self) -> int:
        """The part of nominal only this team may use."""
        return self.nominal - self.lending_limit if self.lending_limit is not None else 0

    @property
    def lendable(self) -> int:
        """The part of nominal this team puts in the cohort's pool."""
        return self.nominal - self.guarded


@dataclass(frozen=True)
class TeamShare:
    """A team's quotas, what it uses now, and its fair-sharing weight."""

    quotas: Mapping[str, ResourceQuota]
    usage: Mapping[str, int] = field(default_factory=dict)
    weight: float = 1.0

    def used(self, resource: str) -> int:
        return int(self.usage.get(resource, 0))


class FitKind(StrEnum):
    NOMINAL = "nominal"  # within the team's own quota
    BORROWING = "borrowing"  # above nominal, on quota the cohort lends
    NO = "no"


@dataclass(frozen=True)
class Fit:
    kind: FitKind
    resource: str | None = None  # the first resource that does not fit (kind NO)
    borrowed: dict[str, int] = field(default_factory=dict)  # what admitting would borrow

    @property
    def fits(self) -> bool:
        return self.kind is not FitKind.NO


class Cohort:
    """A snapshot of the teams of one cohort (or one team alone), keyed by team slug.

    Admission takes one decision at a time and ``add``s each admitted job before the next,
    so two decisions never spend the same idle GPU.
    """

    def __init__(self, teams: Mapping[str, TeamShare]) -> None:
        self._quotas = {slug: dict(t.quotas) for slug, t in teams.items()}
        self._usage = {slug: dict(t.usage) for slug, t in teams.items()}
        self._weights = {slug: t.weight for slug, t in teams.items()}
        # The pool and its use, per resource, kept as usage changes: an admission pass asks
        # for them for every head of every team after each decision (50 teams × hundreds
        # of decisions), and summing over the teams each time was most of a pass's time.
        self._pool: dict[str, int] = {}
        self._pool_used: dict[str, int] = {}
        for quotas in self._quotas.values():
            for resource, quota in quotas.items():
                self._pool[resource] = self._pool.get(resource, 0) + quota.lendable
        for resource in self._pool:
            self._pool_used[resource] = sum(
                max(0, self.usage(team, resource) - self._guarded(team, resource))
                for team in self._quotas
            )

    # --- the figures ---------------------------------------------------------------------

    def teams(self) -> list[str]:
        return sorted(self._quotas)

    def quota(self, team: str, resource: str) -> ResourceQuota | None:
        return self._quotas[team].get(resource)

    def usage(self, team: str, resource: str) -> int:
        return int(self._usage[team].get(resource, 0))

    def pool(self, resource: str) -> int:
        """The quota of ``resource`` the cohort's teams lend."""
        return self._pool.get(resource, 0)

    def pool_usage(self, resource: str) -> int:
        """How much of the pool is in use (by its owners or by borrowers)."""
        if resource not in self._pool_used:
            # Only teams without a quota row for it use it: all of that comes from the pool.
            return sum(self.usage(team, resource) for team in self._quotas)
        return self._pool_used[resource]

    def available(self, team: str, resource: str) -> int:
        """How much more of ``resource`` the team can take now."""
        quota = self.quota(team, resource)
        if quota is None:
            return 0
        used = self.usage(team, resource)
        from_pool_used = max(0, used - quota.guarded)
        from_pool = self.pool(resource) - self.pool_usage(resource)
        if quota.borrowing_limit is not None:
            from_pool = min(from_pool, quota.lendable - from_pool_used + quota.borrowing_limit)
        return max(0, quota.guarded - used) + max(0, from_pool)

    def most(self, team: str, resource: str) -> int:
        """The most of ``resource`` the team could ever hold (the rest of the cohort idle)."""
        quota = self.quota(team, resource)
        if quota is None:
            return 0
        ceiling = quota.guarded + self.pool(resource)
        if quota.borrowing_limit is not None:
            ceiling = min(ceiling, quota.nominal + quota.borrowing_limit)
        return ceiling

    def borrowed(self, team: str, resource: str) -> int:
        """How far the team is above its nominal quota of ``resource``."""
        quota = self.quota(team, resource)
        nominal = quota.nominal if quota is not None else 0
        return max(0, self.usage(team, resource) - nominal)

    def lent(self) -> dict[str, dict[str, int]]:
        """What each team lends now: the cohort's borrowed total on each resource, spread
        over the teams with idle lendable quota in proportion to it (largest remainder)."""
        out: dict[str, dict[str, int]] = {team: {} for team in self._quotas}
        resources = {r for quotas in self._quotas.values() for r in quotas}
        for resource in sorted(resources):
            taken = sum(self.borrowed(team, resource) for team in self._quotas)
            idle = {
                team: min(
                    q[resource].lendable, max(0, q[resource].nominal - self.usage(team, resource))
                )
                for team, q in self._quotas.items()
                if resource in q
            }
            for team, amount in _spread(taken, idle).items():
                out[team][resource] = amount
        return out

    def share(self, team: str, incoming: Amounts | None = None) -> float:
        """The team's weighted dominant-resource share of what the cohort lends: the largest,
        over resources, of 1000 × borrowed ÷ the pool, divided by the team's weight. 0 when
        it borrows nothing; infinite for a borrowing team of weight 0."""
        incoming = incoming or {}
        dominant = 0.0
        for resource, quota in self._quotas[team].items():
            borrowed = max(
                0, self.usage(team, resource) + incoming.get(resource, 0) - quota.nominal
            )
            pool = self.pool(resource)
            if borrowed and pool:
                dominant = max(dominant, 1000 * borrowed / pool)
        if dominant == 0:
            return 0.0
        weight = self._weights.get(team, 1.0)
        return dominant / weight if weight > 0 else float("inf")

    # --- decisions -----------------------------------------------------------------------

    def fit(self, team: str, demand: Amounts) -> Fit:
        """Whether a job of ``team`` with ``demand`` fits now: on nominal quota, by borrowing,
        or not (naming the first resource, in name order, that does not fit). Resources the
        team has no quota row for are not limited (as the portal's quotas always were)."""
        borrowed: dict[str, int] = {}
        for resource in sorted(demand):
            amount = int(demand[resource])
            quota = self.quota(team, resource)
            if quota is None or amount == 0:
                continue
            if amount > self.available(team, resource):
                return Fit(FitKind.NO, resource)
            above = self.usage(team, resource) + amount - quota.nominal
            if above > 0:
                borrowed[resource] = min(above, amount)
        return Fit(FitKind.BORROWING if borrowed else FitKind.NOMINAL, borrowed=borrowed)

    def copy(self) -> Cohort:
        """An independent snapshot to simulate on."""
        return Cohort(
            {
                team: TeamShare(self._quotas[team], dict(self._usage[team]), self._weights[team])
                for team in self._quotas
            }
        )

    def add(self, team: str, demand: Amounts) -> None:
        for resource, amount in demand.items():
            self._use(team, resource, int(amount))

    def remove(self, team: str, demand: Amounts) -> None:
        for resource, amount in demand.items():
            self._use(team, resource, -int(amount))

    def _guarded(self, team: str, resource: str) -> int:
        quota = self._quotas[team].get(resource)
        return quota.guarded if quota is not None else 0

    def _use(self, team: str, resource: str, amount: int) -> None:
        before = self.usage(team, resource)
        self._usage[team][resource] = before + amount
        if resource in self._pool_used:
            guarded = self._guarded(team, resource)
            self._pool_used[resource] += max(0, before + amount - guarded) - max(
                0, before - guarded
            )


def _spread(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total`` split over ``weights`` in proportion, in whole units (largest remainder)."""
    whole = sum(weights.values())
    if total <= 0 or whole <= 0:
        return dict.fromkeys(weights, 0)
    total = min(total, whole)
    exact = {key: total * w / whole for key, w in weights.items()}
    out = {key: int(value) for key, value in exact.items()}
    left = total - sum(out.values())
    for key in sorted(exact, key=lambda k: (out[k] - exact[k], k))[:left]:
        out[key] += 1
    return out


# --- explanations ------------------------------------------------------------------------


def wait_reason(
    cohort: Cohort,
    *,
    team: str,
    demand: Amounts,
    cohort_name: str | None,
    amount: Callable[[str, int], str] = lambda resource, value: str(value),
) -> str | None:
    """Why a job of ``team`` with ``demand`` does not fit now, in the words the job page
    shows (None when it fits):

    ``team vision uses 16 of 16 nvidia.com/gpu (nominal) and may borrow 8 more; the cohort
    research has 0 unused: robotics uses 8 of its 8``, or, past the team's own limit,
    ``team vision uses 12 of 8 nvidia.com/gpu (nominal); would exceed vision's borrowing
    limit (4)``. A team without a cohort keeps today's ``team vision uses 16 of 16
    nvidia.com/gpu``. ``amount`` words a figure in the resource's unit (cores, GiB).
    """
    fit = cohort.fit(team, demand)
    if fit.fits or fit.resource is None:
        return None
    resource = fit.resource
    quota = cohort.quota(team, resource)
    assert quota is not None  # only resources with a quota row can refuse
    used = cohort.usage(team, resource)
    uses = f"team {team} uses {amount(resource, used)} of {amount(resource, quota.nominal)}"
    if cohort_name is None:
        return f"{uses} {resource}"
    head = f"{uses} {resource} (nominal)"
    wanted = used + int(demand[resource]) - quota.nominal
    if quota.borrowing_limit is not None and wanted > quota.borrowing_limit:
        limit = amount(resource, quota.borrowing_limit)
        return f"{head}; would exceed {team}'s borrowing limit ({limit})"
    may = max(0, cohort.most(team, resource) - max(used, quota.nominal))
    unused = max(0, cohort.pool(resource) - cohort.pool_usage(resource))
    others = ", ".join(
        f"{other} uses {amount(resource, cohort.usage(other, resource))} of its "
        f"{amount(resource, other_quota.nominal)}"
        for other in cohort.teams()
        if other != team and (other_quota := cohort.quota(other, resource)) is not None
    )
    cohort_words = f"the cohort {cohort_name} has {amount(resource, unused)} unused"
    if others:
        cohort_words += f": {others}"
    return f"{head} and may borrow {amount(resource, may)} more; {cohort_words}"


# --- admission order across teams ----------------------------------------------------------


@dataclass(frozen=True)
class Head:
    """The first queued job of a team, competing with the other teams' heads."""

    team: str
    job_id: int
    priority: int
    submitted_at: datetime
    demand: Amounts


def next_head(cohort: Cohort, heads: Iterable[Head]) -> tuple[Head, Fit] | None:
    """Which team's head job goes next, among those that fit now.

    Kueue's order with fair sharing: jobs that fit on nominal quota first; then, among
    borrowers, the lower weighted share after admission; then higher priority; then the
    older submission. None when no head fits.
    """
    ranked = []
    for head in heads:
        fit = cohort.fit(head.team, head.demand)
        if not fit.fits:
            continue
        share = 0.0 if fit.kind is FitKind.NOMINAL else cohort.share(head.team, head.demand)
        key = (
            fit.kind is not FitKind.NOMINAL,
            share,
            -head.priority,
            head.submitted_at,
            head.job_id,
        )
        ranked.append((key, head, fit))
    if not ranked:
        return None
    _, head, fit = min(ranked, key=lambda item: item[0])
    return head, fit


# --- reclaim: which borrowing jobs to evict ------------------------------------------------


@dataclass(frozen=True)
class Running:
    """An admitted job that could be evicted."""

    team: str
    job_id: int
    priority: int
    admitted_at: datetime
    demand: Amounts


def preemption_victims(
    cohort: Cohort, *, team: str, demand: Amounts, candidates: Sequence[Running]
) -> list[Running] | None:
    """The fewest admitted jobs to evict so that a job of ``team`` fits on its nominal
    quota, or None when evicting cannot do it. [] when it fits already.

    ``candidates`` are what the caller allows: jobs of other teams running on borrowed
    quota (a *reclaim*), and jobs of ``team`` itself of lower priority (preemption within
    the team). Only a job that will run within its team's nominal quota preempts: a job
    that would borrow waits for quota instead, so a preemptor can never be a reclaim
    victim itself (no loop).

    Kueue's order: other teams' jobs before the team's own, lower priority first, then the
    most recently admitted. Candidates are removed from a copy of the snapshot in that
    order (skipping another team's job once that team is no longer over its nominal quota
    on a contested resource: a team within its nominal quota is never evicted from) until
    the job fits; then every removed job whose return still lets it fit is put back,
    newest removal first.
    """
    if cohort.fit(team, demand).kind is FitKind.NOMINAL:
        return []
    contested = {r for r, amount in demand.items() if amount and cohort.quota(team, r) is not None}
    own = [c for c in candidates if c.team == team and contested & set(c.demand)]
    for resource in contested:
        quota = cohort.quota(team, resource)
        assert quota is not None
        floor = cohort.usage(team, resource) - sum(int(c.demand.get(resource, 0)) for c in own)
        if floor + int(demand[resource]) > quota.nominal:
            return None  # it would borrow even alone: it waits for quota, it never evicts
    simulated = cohort.copy()
    order = sorted(
        (c for c in candidates if contested & set(c.demand)),
        key=lambda c: (c.team == team, c.priority, -c.admitted_at.timestamp(), -c.job_id),
    )
    removed: list[Running] = []
    for candidate in order:
        if candidate.team != team and not any(
            simulated.borrowed(candidate.team, r) > 0 for r in contested if r in candidate.demand
        ):
            continue
        simulated.remove(candidate.team, candidate.demand)
        removed.append(candidate)
        if simulated.fit(team, demand).kind is FitKind.NOMINAL:
            break
    else:
        return None
    for candidate in reversed(removed[:-1]):
        simulated.add(candidate.team, candidate.demand)
        if simulated.fit(team, demand).kind is FitKind.NOMINAL:
            removed.remove(candidate)
        else:
            simulated.remove(candidate.team, candidate.demand)
    return removed
