"""Reads for teams and memberships: which teams a user sees, and their role in each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Exists, OuterRef, QuerySet

from cluster.models import Cluster
from core.errors import NotFound
from scheduling.sharing import ResourceQuota
from teams.models import GpuQuota, Membership, Team


def teams_for_user(*, user: User | AnonymousUser) -> QuerySet[Team]:
    """Teams whose jobs the user may see: their own; platform admins see every team."""
    if not user.is_authenticated:
        return Team.objects.none()
    if getattr(user, "is_superuser", False):
        return Team.objects.all()
    # No DISTINCT: a user has at most one membership per team (membership_unique_user_team),
    # and DISTINCT over every column costs more to plan than the query costs to run.
    return Team.objects.filter(memberships__user=user)


@dataclass(frozen=True)
class TeamQuotas:
    """A team's quotas on one cluster (``on``), or as read: every cluster's rows, each
    cluster's under its id (``None``: the first cluster's)."""

    team: Team
    limits: dict[str, int]  # resource → limit (nominal), as the team's GpuQuota rows say
    borrowing_limits: dict[str, int | None] = field(default_factory=dict)
    lending_limits: dict[str, int | None] = field(default_factory=dict)
    clusters: dict[int | None, TeamQuotas] = field(default_factory=dict)

    def on(self, cluster: Cluster) -> TeamQuotas:
        """The team's quotas on ``cluster`` (none there: empty)."""
        key = None if cluster.is_first else cluster.pk
        if not self.clusters:
            return self if key is None else TeamQuotas(self.team, {})
        return self.clusters.get(key) or TeamQuotas(self.team, {})

    def ceilings(self, pool: dict[str, int]) -> dict[str, int]:
        """The most of each resource the team could ever hold, given what its cohort lends
        (``pool``; empty without a cohort): Kueue's ``min(nominal + borrowing limit,
        guarded + pool)``."""
        out = {}
        for resource, nominal in self.limits.items():
            if resource not in pool:
                out[resource] = nominal
                continue
            quota = ResourceQuota(
                nominal, self.borrowing_limits.get(resource), self.lending_limits.get(resource)
            )
            ceiling = quota.guarded + pool[resource]
            if quota.borrowing_limit is not None:
                ceiling = min(ceiling, nominal + quota.borrowing_limit)
            out[resource] = max(nominal, ceiling)
        return out


# The team by slug with its quota rows (none: one row of NULLs). Plain SQL that PostgreSQL
# and SQLite both run; the membership condition is added for everyone but platform admins.
_TEAM_QUOTAS_SQL = """
SELECT t.id, t.name, t.slug, t.namespace, t.description, t.created_at, t.cohort_id,
       t.weight, t.inference_may_borrow,
       q.resource AS quota_resource, q."limit" AS quota_limit,
       q.borrowing_limit AS quota_borrowing_limit, q.lending_limit AS quota_lending_limit,
       q.cluster_id AS quota_cluster_id
FROM teams_team t LEFT JOIN teams_gpuquota q ON q.team_id = t.id
WHERE t.slug = %s
"""
_MEMBER_SQL = (
    " AND EXISTS (SELECT 1 FROM teams_membership m WHERE m.team_id = t.id AND m.user_id = %s)"
)


def team_quotas_for_user(*, user: User | AnonymousUser, slug: str) -> TeamQuotas | None:
    """The team ``slug`` if ``teams_for_user`` holds it, with its quota limits; else None.

    Every submit and preview reads it, so it is one fixed statement through Django's
    documented ``Manager.raw()`` (which builds the ``Team``) rather than ORM queries, whose
    compilation cost 0.9–1.5 ms of CPU per call against 0.2 ms (in-process, 2026-11-24; see
    ``cluster.selectors.catalog_get`` for what the two together change).
    ``tests/teams/test_team_quotas_for_user.py`` pins it to ``teams_for_user``.
    """
    if not user.is_authenticated:
        return None
    if getattr(user, "is_superuser", False):
        rows = list(Team.objects.raw(_TEAM_QUOTAS_SQL, [slug]))
    else:
        rows = list(Team.objects.raw(_TEAM_QUOTAS_SQL + _MEMBER_SQL, [slug, user.pk]))
    if not rows:
        return None
    quotas = [r for r in rows if getattr(r, "quota_resource") is not None]  # noqa: B009
    # raw() columns that are not fields of Team, read by name.
    by_cluster: dict[int | None, list[Any]] = {}
    for row in quotas:
        by_cluster.setdefault(getattr(row, "quota_cluster_id"), []).append(row)  # noqa: B009
    return TeamQuotas(
        **_quotas_of(rows[0], by_cluster.get(None, [])),
        clusters={
            cluster_id: TeamQuotas(**_quotas_of(rows[0], found))
            for cluster_id, found in by_cluster.items()
        },
    )


def _quotas_of(team: Team, rows: list[Any]) -> dict[str, Any]:
    return {
        "team": team,
        "limits": {getattr(r, "quota_resource"): getattr(r, "quota_limit") for r in rows},  # noqa: B009
        "borrowing_limits": {
            getattr(r, "quota_resource"): getattr(r, "quota_borrowing_limit")  # noqa: B009
            for r in rows
        },
        "lending_limits": {
            getattr(r, "quota_resource"): getattr(r, "quota_lending_limit")  # noqa: B009
            for r in rows
        },
    }


def cohort_pool(*, cohort_id: int, cluster: Cluster | None = None) -> dict[str, int]:
    """What the cohort's teams lend on the cluster (the first with ``None``), per resource,
    in quota units (Kueue's pool: the sum of each team's nominal quota, or of its lending
    limit where one is set)."""
    pool: dict[str, int] = {}
    found = GpuQuota.objects.filter(team__cohort_id=cohort_id).of(cluster)
    rows = found.values_list("resource", "limit", "lending_limit")
    for resource, limit, lending_limit in rows:
        pool[resource] = pool.get(resource, 0) + ResourceQuota(limit, None, lending_limit).lendable
    return pool


@dataclass(frozen=True)
class TeamRole:
    team: Team
    role: str


def team_roles_for_user(*, user: User) -> list[TeamRole]:
    """The user's teams, each with the user's role in it, in slug order: one indexed query.

    Platform admins act as leads of every team (as in ``membership_role``), so they get
    every team with the role ``lead``.
    """
    if user.is_superuser:
        return [TeamRole(team, Membership.Role.LEAD) for team in Team.objects.order_by("slug")]
    memberships = Membership.objects.filter(user=user).select_related("team").order_by("team__slug")
    return [TeamRole(m.team, m.role) for m in memberships]


def membership_role(*, user: User | AnonymousUser, team: Team) -> str | None:
    """``member``, ``lead`` or None. Superusers act as leads of every team."""
    if not user.is_authenticated:
        return None
    if getattr(user, "is_superuser", False):
        return Membership.Role.LEAD
    membership = Membership.objects.filter(user=user, team=team).only("role").first()
    return membership.role if membership else None


def team_get_for_user(*, user: User | AnonymousUser, slug: str) -> Team:
    """A team the user belongs to (platform admins: any); otherwise "not found"."""
    team = teams_for_user(user=user).filter(slug=slug).first()
    if team is None:
        raise NotFound("No such team.")
    return team


def team_has_cluster(*, team: Team, cluster: Cluster) -> bool:
    """The team's namespace and queues belong on ``cluster``: it has quota there. On the
    first cluster also a team with quota on no other (every team from before several
    clusters, and one given no quota yet)."""
    return teams_on_cluster(cluster=cluster).filter(pk=team.pk).exists()


def teams_on_cluster(*, cluster: Cluster) -> QuerySet[Team]:
    """The teams ``team_has_cluster`` puts on ``cluster``."""
    if not cluster.is_first:
        return Team.objects.filter(quotas__cluster=cluster).distinct()
    elsewhere = GpuQuota.objects.filter(team=OuterRef("pk"), cluster__isnull=False)
    here = GpuQuota.objects.filter(team=OuterRef("pk"), cluster__isnull=True)
    return Team.objects.filter(Exists(here) | ~Exists(elsewhere))


def quotas_on_cluster(*, team: Team, cluster: Cluster) -> QuerySet[GpuQuota]:
    """The team's quota rows on ``cluster`` (the first's have no cluster)."""
    return GpuQuota.objects.filter(team=team).of(cluster)
