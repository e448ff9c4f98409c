"""A cohort over time: what each team held of its own quota, borrowed and lent.

From the portal's job rows (when each job started and finished, and what it demanded),
not from Prometheus: quota is the portal's bookkeeping. Borrowed at a moment is what a
team held above its nominal quota; lent is the cohort's borrowed total spread over the
teams that had idle lendable quota then (``scheduling.sharing.Cohort.lent``). The quotas are
today's: a quota changed within the range is drawn as it is now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from jobs.models import ACTIVE_STATES, Job
from jobs.selectors.cohorts import CohortView, cohort_get_for_user
from monitoring import queries
from monitoring.selectors.common import Window
from monitoring.selectors.team import allocation_series, team_jobs_between
from scheduling.quantity import quota_base
from scheduling.resources import CPU, MEMORY
from scheduling.sharing import Cohort, ResourceQuota, TeamShare


@dataclass
class SharingSeries:
    """One quota resource of the cohort over the range, per team slug."""

    resource: str
    nominal: dict[str, int]
    own: dict[str, list[float]] = field(default_factory=dict)  # held within nominal
    borrowed: dict[str, list[float]] = field(default_factory=dict)
    lent: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class CohortUsage:
    view: CohortView
    range_key: str
    window: Window
    timestamps: list[float]
    resources: list[SharingSeries]
    borrowing_jobs: list[Job]


def _lending_limits(view: CohortView) -> dict[str, dict[str, int | None]]:
    return {
        member.team.slug: {q.resource: q.lending_limit for q in member.quotas}
        for member in view.teams
    }


def cohort_usage_get(
    *, user: User | AnonymousUser, slug: str, range_key: str, now: datetime | None = None
) -> CohortUsage:
    """The cohort ``slug`` (one of the user's teams' cohorts) now and over the range."""
    now = now or timezone.now()
    view = cohort_get_for_user(user=user, slug=slug)
    _, seconds = queries.parse_range(range_key)
    window = Window.last(seconds, now=now)
    grid = window.grid()
    jobs = {
        m.team.slug: list(team_jobs_between(m.team, window.start, window.end)) for m in view.teams
    }
    lending = _lending_limits(view)
    resources = sorted(
        {q.resource for m in view.teams for q in m.quotas if q.resource not in (CPU, MEMORY)}
    )
    out = []
    for resource in resources:
        nominal = {
            m.team.slug: q.nominal for m in view.teams for q in m.quotas if q.resource == resource
        }
        series = SharingSeries(resource, nominal)
        held = {
            team: allocation_series(jobs[team], grid, now=now, resource=resource)
            for team in nominal
        }
        for team, values in held.items():
            series.own[team] = [min(v, nominal[team]) for v in values]
            series.borrowed[team] = [max(0.0, v - nominal[team]) for v in values]
            series.lent[team] = []
        for index in range(len(grid)):
            # Quota units throughout: a job's demand of a GPU resource is a count.
            snapshot = Cohort(
                {
                    team: TeamShare(
                        {
                            resource: ResourceQuota(
                                quota_base(resource, nominal[team]),
                                lending_limit=lending[team].get(resource),
                            )
                        },
                        {resource: int(held[team][index])},
                    )
                    for team in nominal
                }
            )
            lent = snapshot.lent()
            for team in nominal:
                series.lent[team].append(float(lent[team].get(resource, 0)))
        out.append(series)
    borrowing_jobs = list(
        Job.objects.filter(
            team__cohort=view.cohort,
            borrowing=True,
            state__in=ACTIVE_STATES,
            admitted_at__isnull=False,
        )
        .select_related("team", "owner")
        .order_by("team__slug", "pk")
    )
    return CohortUsage(
        view=view,
        range_key=range_key,
        window=window,
        timestamps=grid,
        resources=out,
        borrowing_jobs=borrowing_jobs,
    )
