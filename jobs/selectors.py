"""Reads: jobs scoped to the user's teams, and quota use."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from jobs.models import ACTIVE_STATES, Job, JobState
from jobs.quota import format_amount, quota_capacity
from portal.errors import NotFound
from portal.models import GpuQuota, Team
from portal.selectors import teams_for_user


def jobs_for_user(
    *,
    user: User | AnonymousUser,
    team: str | None = None,
    state: str | None = None,
    kind: str | None = None,
) -> QuerySet[Job]:
    """Jobs of the user's teams, newest first, optionally filtered."""
    jobs = Job.objects.filter(team__in=teams_for_user(user=user)).select_related("team", "owner")
    if team:
        jobs = jobs.filter(team__slug=team)
    if state:
        jobs = jobs.filter(state=state)
    if kind:
        jobs = jobs.filter(kind=kind)
    return jobs


def job_get_for_user(*, user: User | AnonymousUser, job_id: int) -> Job:
    """One job of the user's teams; another team's job is "not found", never "forbidden"."""
    job = jobs_for_user(user=user).filter(pk=job_id).first()
    if job is None:
        raise NotFound("No such job.")
    return job


def team_usage(*, team: Team) -> dict[str, int]:
    """What the team's admitted, unfinished jobs hold, per quota resource (base units)."""
    totals: dict[str, int] = defaultdict(int)
    demands = Job.objects.filter(
        team=team, state__in=ACTIVE_STATES, admitted_at__isnull=False
    ).values_list("demand", flat=True)
    for demand in demands:
        for resource, amount in demand.items():
            totals[resource] += int(amount)
    return dict(totals)


@dataclass(frozen=True)
class QuotaUse:
    resource: str
    limit: int  # in the quota's own unit (devices, cores, GiB)
    used: int  # same unit, rounded up
    used_display: str
    limit_display: str

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.limit)) if self.limit else 100


def quota_usage(*, team: Team) -> list[QuotaUse]:
    """Each quota of the team with its limit and what admitted jobs hold now."""
    usage = team_usage(team=team)
    rows = []
    for quota in GpuQuota.objects.filter(team=team).order_by("resource"):
        used_base = usage.get(quota.resource, 0)
        unit = quota_capacity(quota.resource, 1)
        used = -(-used_base // unit)  # round up: 500m of cpu is "1 core in use"
        rows.append(
            QuotaUse(
                resource=quota.resource,
                limit=quota.limit,
                used=used,
                used_display=format_amount(quota.resource, used_base),
                limit_display=format_amount(
                    quota.resource, quota_capacity(quota.resource, quota.limit)
                ),
            )
        )
    return rows


def queued_count(*, team: Team) -> int:
    return Job.objects.filter(team=team, state=JobState.QUEUED).count()
