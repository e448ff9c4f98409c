"""Reads for teams, memberships and the GPU catalog."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import QuerySet

from core.db import Read, reads_fetch
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
    team: Team
    limits: dict[str, int]  # resource → limit, as the team's GpuQuota rows say


# The team by slug with its quota rows (none: one row of NULLs), for a member or for
# everyone (platform admins). Plain SQL that SQLite runs too.
_TEAM_QUOTAS_SQL = (
    "SELECT {team_columns}, q.{resource}, q.{limit} FROM {team} t "
    "LEFT JOIN {quota} q ON q.{quota_team} = t.{team_id} WHERE t.{slug} = %s"
)
_MEMBER_SQL = (
    " AND EXISTS (SELECT 1 FROM {membership} m WHERE m.{membership_team} = t.{team_id} "
    "AND m.{membership_user} = %s)"
)


@functools.cache
def _team_quotas_sql(*, members_only: bool) -> str:
    # Only the models' own table and column names are formatted in; nothing from a request.
    quote = connection.ops.quote_name
    columns = {
        "team": quote(Team._meta.db_table),
        "team_columns": ", ".join(f"t.{quote(f.column)}" for f in Team._meta.concrete_fields),
        "team_id": quote(Team._meta.pk.column),
        "slug": quote(Team._meta.get_field("slug").column),
        "quota": quote(GpuQuota._meta.db_table),
        "quota_team": quote(GpuQuota._meta.get_field("team").column),
        "resource": quote(GpuQuota._meta.get_field("resource").column),
        "limit": quote(GpuQuota._meta.get_field("limit").column),
        "membership": quote(Membership._meta.db_table),
        "membership_team": quote(Membership._meta.get_field("team").column),
        "membership_user": quote(Membership._meta.get_field("user").column),
    }
    sql = _TEAM_QUOTAS_SQL + (_MEMBER_SQL if members_only else "")
    return sql.format(**columns)


def team_quotas_read(*, user: User | AnonymousUser, slug: str) -> Read[TeamQuotas | None]:
    """The team ``slug`` if ``teams_for_user`` holds it, with its quota limits; else None.

    One fixed statement instead of two ORM queries, whose compilation cost more CPU than
    their round trips; a read, so that submitting a job sends it with the others it needs
    (``reads_fetch``). An anonymous user is a member of no team: no row matches.
    """
    members_only = not getattr(user, "is_superuser", False)
    params: list[str | int | None] = [slug, user.pk] if members_only else [slug]
    return Read(_team_quotas_sql(members_only=members_only), params, _team_quotas_decode)


def _team_quotas_decode(rows: list[tuple[Any, ...]]) -> TeamQuotas | None:
    if not rows:
        return None
    fields = Team._meta.concrete_fields
    team = Team.from_db(connection.alias, [f.attname for f in fields], rows[0][: len(fields)])
    limits = {row[-2]: row[-1] for row in rows if row[-2] is not None}
    return TeamQuotas(team=team, limits=limits)


def team_quotas_for_user(*, user: User | AnonymousUser, slug: str) -> TeamQuotas | None:
    """``team_quotas_read`` on its own."""
    if not user.is_authenticated:
        return None
    found: TeamQuotas | None = reads_fetch(team_quotas_read(user=user, slug=slug))[0]
    return found


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
