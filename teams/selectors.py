"""Reads for teams and memberships: which teams a user sees, and their role in each."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from core.errors import NotFound
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


def team_quotas_for_user(*, user: User | AnonymousUser, slug: str) -> TeamQuotas | None:
    """The team ``slug`` if ``teams_for_user`` holds it, with its quota limits; else None.

    Every submit and preview reads it: the quota rows with their team joined, one query
    (a second one only for a team without quotas).
    """
    team_query = teams_for_user(user=user).filter(slug=slug)
    quotas = list(GpuQuota.objects.filter(team__in=team_query).select_related("team").order_by())
    if quotas:
        return TeamQuotas(team=quotas[0].team, limits={q.resource: q.limit for q in quotas})
    team = team_query.first()
    return TeamQuotas(team=team, limits={}) if team is not None else None


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
