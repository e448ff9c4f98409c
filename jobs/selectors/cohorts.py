"""Reads for cohorts: their teams, what each uses, borrows and lends, and the totals."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AnonymousUser, User

from core.errors import NotFound
from jobs.models import ACTIVE_STATES, Job
from jobs.selectors.jobs import QuotaUse, quota_usage_for_teams
from teams.models import Cohort, Team
from teams.selectors import teams_for_user


@dataclass(frozen=True)
class CohortMember:
    team: Team
    quotas: list[QuotaUse]
    borrowing_jobs: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class CohortView:
    cohort: Cohort
    teams: list[CohortMember]
    totals: list[dict[str, Any]]  # per resource: nominal, used, borrowed, unused


def _views(cohorts: list[Cohort]) -> list[CohortView]:
    teams = list(Team.objects.filter(cohort__in=cohorts).order_by("slug"))
    quotas = quota_usage_for_teams(teams=teams)
    borrowing: dict[int, list[int]] = defaultdict(list)
    rows = Job.objects.filter(
        team__in=teams, borrowing=True, state__in=ACTIVE_STATES, admitted_at__isnull=False
    ).order_by("pk")
    for job_id, team_id in rows.values_list("pk", "team_id"):
        borrowing[team_id].append(job_id)
    views = []
    for cohort in cohorts:
        members = [
            CohortMember(team, quotas[team.pk], borrowing[team.pk])
            for team in teams
            if team.cohort_id == cohort.pk
        ]
        totals: dict[str, dict[str, int]] = {}
        for member in members:
            for quota in member.quotas:
                total = totals.setdefault(
                    quota.resource, {"nominal": 0, "used": 0, "borrowed": 0, "within": 0}
                )
                total["nominal"] += quota.nominal
                total["used"] += quota.used
                total["borrowed"] += quota.borrowed
                total["within"] += min(quota.used, quota.nominal)
        views.append(
            CohortView(
                cohort,
                members,
                [
                    {
                        "resource": resource,
                        "nominal": t["nominal"],
                        "used": t["used"],
                        "borrowed": t["borrowed"],
                        "unused": max(0, t["nominal"] - t["within"] - t["borrowed"]),
                    }
                    for resource, t in sorted(totals.items())
                ],
            )
        )
    return views


def cohort_views(*, slug: str | None = None, user: User | None = None) -> list[CohortView]:
    """Every cohort (or the one named ``slug``), by slug; with ``user``, only those of
    the user's teams."""
    cohorts = Cohort.objects.order_by("slug")
    if slug is not None:
        cohorts = cohorts.filter(slug=slug)
    if user is not None:
        cohorts = cohorts.filter(teams__in=teams_for_user(user=user)).distinct()
    return _views(list(cohorts))


def cohorts_for_user(*, user: User | AnonymousUser, slug: str | None = None) -> list[CohortView]:
    """The cohorts of the user's teams (platform admins: every cohort), by slug."""
    if not isinstance(user, User):
        return []
    return cohort_views(slug=slug, user=None if user.is_superuser else user)


def cohort_get_for_user(*, user: User | AnonymousUser, slug: str) -> CohortView:
    """One cohort of the user's teams; any other is "not found", never "forbidden"."""
    found = cohorts_for_user(user=user, slug=slug)
    if not found:
        raise NotFound("No such cohort.")
    return found[0]
