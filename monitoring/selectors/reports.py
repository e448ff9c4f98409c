"""GPU-hour reports: the rolled-up days (``GpuUsageDay``) summed over a period, grouped.

One reader serves the reports page, its CSV and ``GET /api/v1/reports/gpu-hours/``, so
the three always show the same numbers. Who sees what: platform admins every team; a
team's leads that team; anyone else only their own jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import F, Max, Q, QuerySet, Sum
from django.utils import timezone

from core.errors import ApplicationError, NotFound
from monitoring.models import GpuUsageDay, RollupDay
from teams.models import Membership, Team
from teams.selectors import teams_for_user

# group_by → the columns a row is keyed by (and sorted on).
GROUPS: dict[str, tuple[str, ...]] = {
    "team": ("team",),
    "user": ("team", "user"),
    "product": ("team", "product"),
    "job": ("team", "user", "product", "job"),
    "day": ("day", "team"),
}
_COLUMNS = {
    "team": "team__slug",
    "user": "user__username",
    "product": "product",
    "job": "job_id",
    "day": "day",
}
MAX_DAYS = 400
HOURS_PLACES = 3
EFFICIENCY_PLACES = 4
CENTS = Decimal("0.01")


@dataclass(frozen=True)
class ReportRow:
    team: str | None
    user: str | None
    product: str | None
    job_id: int | None
    job_name: str | None
    day: date | None
    gpu_hours_allocated: float
    gpu_hours_used: float | None  # None: no metrics for any of these hours
    efficiency: float | None  # used ÷ the allocated hours that have metrics
    idle_gpu_hours: float | None
    cost: Decimal | None  # None: none of the products has a price
    gpu_hours_unmeasured: float  # allocated hours Prometheus had nothing for


@dataclass
class Report:
    start: date
    end: date
    group_by: str
    team: Team | None
    scope: str  # all | teams | own
    rows: list[ReportRow]
    totals: ReportRow
    currency: str
    days_missing: list[date] = field(default_factory=list)  # not rolled up yet
    days_unmeasured: list[date] = field(default_factory=list)  # rolled up without metrics
    days_due: int = 0  # the period's days up to today

    @property
    def nothing_rolled_up(self) -> bool:
        """No day of the period is rolled up yet: its figures are not zero, just not known."""
        return self.days_due > 0 and len(self.days_missing) == self.days_due


@dataclass(frozen=True)
class RollupSchedule:
    every_minutes: float
    last_at: datetime | None  # None: no day rolled up yet
    next_at: datetime | None  # when the next run is due (None before the first)


def rollup_schedule_get(*, now: datetime | None = None) -> RollupSchedule:
    """When the periodic rollup (beat, every ``ACCOUNTING_INTERVAL_SECONDS``) last ran, and
    when the next run is due (at the latest now, when it is late)."""
    now = now or timezone.now()
    every = timedelta(seconds=float(settings.ACCOUNTING_INTERVAL_SECONDS))
    last = RollupDay.objects.aggregate(last=Max("rolled_up_at"))["last"]
    return RollupSchedule(
        every_minutes=every.total_seconds() / 60,
        last_at=last,
        next_at=None if last is None else max(last + every, now),
    )


def period_check(start: date | None, end: date | None) -> tuple[date, date]:
    """Both days included; at most ``MAX_DAYS``; errors name the field and the fix."""
    errors: dict[str, list[str]] = {}
    if start is None:
        errors["start"] = ["Give the first day as YYYY-MM-DD."]
    if end is None:
        errors["end"] = ["Give the last day (included) as YYYY-MM-DD."]
    if start is not None and end is not None:
        if end < start:
            errors["end"] = [f"end ({end}) is before start ({start}): swap them."]
        elif (end - start).days + 1 > MAX_DAYS:
            errors["end"] = [
                f"At most {MAX_DAYS} days per report (asked for {(end - start).days + 1}): "
                "ask for a shorter period."
            ]
    if errors:
        raise ApplicationError(
            "; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()), field_errors=errors
        )
    assert start is not None and end is not None
    return start, end


def _scope(user: User | AnonymousUser) -> tuple[str, Q]:
    """What the user may see of the rolled-up rows, and the word for it."""
    if not user.is_authenticated:
        return "own", Q(pk__in=[])
    if user.is_superuser:
        return "all", Q()
    led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
    mine = Q(user_id=user.pk)
    if led.exists():
        return "teams", Q(team_id__in=led) | mine
    return "own", mine


def _rounded(value: float | None, places: int = HOURS_PLACES) -> float | None:
    return None if value is None else round(value, places)


def _row(values: dict[str, Any], names: dict[int, str]) -> ReportRow:
    allocated = float(values["allocated"] or 0.0)
    measured = float(values["measured"] or 0.0)
    used = values["used"]
    cost = values["cost"]
    job_id = values.get("job_id")
    return ReportRow(
        team=values.get("team__slug"),
        user=values.get("user__username"),
        product=values.get("product"),
        job_id=job_id,
        job_name=names.get(job_id) if job_id is not None else None,
        day=values.get("day"),
        gpu_hours_allocated=round(allocated, HOURS_PLACES),
        gpu_hours_used=_rounded(used),
        efficiency=_rounded(used / measured, EFFICIENCY_PLACES)
        if used is not None and measured > 0
        else None,
        idle_gpu_hours=_rounded(values["idle"]),
        cost=None if cost is None else Decimal(cost).quantize(CENTS),
        gpu_hours_unmeasured=round(max(0.0, allocated - measured), HOURS_PLACES),
    )


_SUMS = {
    "allocated": Sum("gpu_hours_allocated"),
    "measured": Sum("gpu_hours_allocated", filter=Q(gpu_hours_used__isnull=False)),
    "used": Sum("gpu_hours_used"),
    "idle": Sum("idle_gpu_hours"),
    "cost": Sum("cost"),
}


def usage_rows(
    *, user: User | AnonymousUser, start: date, end: date, team: Team | None = None
) -> QuerySet[GpuUsageDay]:
    """The rolled-up rows of the period the user may see (of ``team`` only, if given)."""
    _, visible = _scope(user)
    rows = GpuUsageDay.objects.filter(visible, day__gte=start, day__lte=end)
    return rows if team is None else rows.filter(team=team)


def _grouped(
    rows: QuerySet[GpuUsageDay],
    group_by: str,
    order: tuple[Any, ...] | None = None,
    limit: int | None = None,
) -> list[ReportRow]:
    columns = [_COLUMNS[name] for name in GROUPS[group_by]]
    grouped = rows.values(*columns).annotate(**_SUMS).order_by(*(order or columns))
    if limit is not None:
        grouped = grouped[:limit]
    found = list(grouped)
    names: dict[int, str] = {}
    if "job_id" in columns:
        ids = [v["job_id"] for v in found if v["job_id"] is not None]
        names = dict(
            GpuUsageDay.objects.filter(job_id__in=ids).values_list("job_id", "job_name").distinct()
        )
    return [_row(values, names) for values in found]


def gpu_hours_report(
    *,
    user: User | AnonymousUser,
    start: date | None,
    end: date | None,
    team_slug: str | None = None,
    group_by: str = "team",
) -> Report:
    """GPU-hours allocated and used, efficiency, idle GPU-hours and cost over [start, end]
    (both included), one row per ``group_by`` key, with the totals and the days the rollup
    has not done (or did without metrics). An unknown team, or one the user does not
    belong to, is "not found"."""
    if group_by not in GROUPS:
        raise ApplicationError(
            f"group_by: must be one of {', '.join(GROUPS)} (got {group_by!r}).",
            field_errors={"group_by": [f"Must be one of {', '.join(GROUPS)}."]},
        )
    start, end = period_check(start, end)
    team = None
    if team_slug:
        team = teams_for_user(user=user).filter(slug=team_slug).first()
        if team is None:
            raise NotFound(f"No such team: {team_slug}.")
    scope, _ = _scope(user)
    rows = usage_rows(user=user, start=start, end=end, team=team)
    totals = rows.aggregate(**_SUMS)
    today = timezone.localdate()
    days = [start + timedelta(days=n) for n in range((min(end, today) - start).days + 1)]
    rolled = dict(
        RollupDay.objects.filter(day__gte=start, day__lte=end).values_list("day", "measured")
    )
    return Report(
        start=start,
        end=end,
        group_by=group_by,
        team=team,
        scope=scope,
        rows=_grouped(rows, group_by),
        totals=_row(totals, {}),
        currency=settings.ACCOUNTING_CURRENCY,
        days_missing=[d for d in days if d not in rolled],
        days_unmeasured=[d for d in days if rolled.get(d) is False],
        days_due=len(days),
    )


def report_rows(*, user: User | AnonymousUser, report: Report, group_by: str) -> list[ReportRow]:
    """The same period, team and scope as ``report`` (already checked), grouped another way:
    the page's other tables and charts, without the totals and day checks again."""
    rows = usage_rows(user=user, start=report.start, end=report.end, team=report.team)
    return _grouped(rows, group_by)


@dataclass
class TeamSummary:
    team: Team
    totals: ReportRow
    users: list[ReportRow]
    wasted: list[ReportRow]


def team_summary_get(*, team: Team, start: date, end: date, top: int = 5) -> TeamSummary:
    """A team's period for its leads' summary (the caller decides who receives it)."""
    rows = GpuUsageDay.objects.filter(team=team, day__gte=start, day__lte=end)
    wasted = rows.filter(idle_gpu_hours__gt=0)
    return TeamSummary(
        team=team,
        totals=_row(rows.aggregate(**_SUMS), {}),
        users=_grouped(rows, "user", order=(F("allocated").desc(), "user__username")),
        wasted=_grouped(
            wasted, "job", order=(F("idle").desc(nulls_last=True), "job_id"), limit=top
        ),
    )


def top_wasted_jobs(
    *, user: User | AnonymousUser, start: date, end: date, team: Team | None = None, limit: int = 10
) -> list[ReportRow]:
    """The jobs that held the most GPU-hours idle in the period, most first."""
    rows = usage_rows(user=user, start=start, end=end, team=team).filter(idle_gpu_hours__gt=0)
    return _grouped(rows, "job", order=(F("idle").desc(nulls_last=True), "job_id"), limit=limit)
