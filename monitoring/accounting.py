"""GPU-hour accounting: the daily rollup into ``GpuUsageDay`` (writes of the monitoring layer).

For one day of the portal's ``TIME_ZONE`` (a job still running counts up to now):

- **allocated**: GPUs (or MIG slices, or time-sliced replicas) the job held × the time it
  held them that day, from its row: its current run, the runs an eviction ended
  (``Job.earlier_runs``), less the time the idle-GPU policy kept a deployment at zero
  replicas (its ``IdleStopped`` … ``Resumed`` timeline entries);
- **used**: its pods' devices' utilisation integrated over the day (``queries.
  used_gpu_seconds``), and **idle**: the held GPU-hours under its team's idle threshold
  (``monitoring.idleness.idle_gpu_seconds``), from Prometheus, one query each for the whole cluster;
- **cost**: allocated × the product's price on that day (``GpuPrice``), when it has one.

The rollup is idempotent: rows are keyed by (day, job) and upserted, rows of jobs no longer
in the day are removed, so running it twice, or re-building a past day, gives the same rows.
When Prometheus cannot answer, allocation is still written, used and idle stay unknown and
the day stays incomplete, so the periodic task measures it again later.
"""

from __future__ import annotations

import logging
import time as clock
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs.models import Job, JobEvent
from monitoring import prometheus, queries
from monitoring.idleness import idle_gpu_seconds
from monitoring.models import GpuPrice, GpuUsageDay, RollupDay
from monitoring.prometheus import MetricsUnavailable
from monitoring.selectors.common import PodKey, pods_to_jobs
from monitoring.selectors.reports import ReportRow, TeamSummary, team_summary_get
from notifications.services import Notice, notice_publish
from scheduling.k8s_time import parse_time
from teams.models import Membership, Team

logger = logging.getLogger(__name__)

Period = tuple[datetime, datetime]
# A pod's series outlives it by up to Prometheus's lookback (5 minutes), and a row's
# finish time can trail the pod's: jobs that ended this long before the day are candidates
# for the day's series too.
SERIES_GRACE = timedelta(minutes=10)
_ROW_FIELDS = [
    "job_name",
    "team",
    "user",
    "product",
    "gpu_hours_allocated",
    "gpu_hours_used",
    "idle_gpu_hours",
    "cost",
    "rolled_up_at",
]


def day_bounds(day: date) -> Period:
    """The day's start and end in the portal's time zone (23 or 25 hours across DST)."""
    zone = timezone.get_default_timezone()
    return (
        datetime.combine(day, time.min, tzinfo=zone),
        datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone),
    )


def accounting_product(job: Job) -> str:
    """What a job's GPU-hours are counted (and priced) as: the GPU product it ran on, a MIG
    profile (``mig-1g.10gb``: slice-hours), or a time-sliced GPU (``shared:<product>``)."""
    gpu = (job.spec or {}).get("gpu") or {}
    if gpu.get("sharing") == "mig" and gpu.get("mig_profile"):
        return f"mig-{gpu['mig_profile']}"
    product = (job.placement or {}).get("gpu_product") or gpu.get("product") or "unknown"
    return f"shared:{product}" if gpu.get("sharing") == "shared" else str(product)


def _overlap(periods: Iterable[Period], start: datetime, end: datetime) -> float:
    return sum(max(0.0, (min(end, b) - max(start, a)).total_seconds()) for a, b in periods)


def _scaled_down(events: list[JobEvent], now: datetime) -> list[Period]:
    """The periods an inference deployment spent at zero replicas (idle policy → resume)."""
    gaps: list[Period] = []
    opened: datetime | None = None
    for event in events:
        if event.reason == "IdleStopped" and opened is None:
            opened = event.created_at
        elif event.reason == "Resumed" and opened is not None:
            gaps.append((opened, event.created_at))
            opened = None
    if opened is not None:
        gaps.append((opened, now))
    return gaps


def held_periods(job: Job, *, now: datetime, scaled_down: Iterable[Period] = ()) -> list[Period]:
    """When the job held its GPUs: earlier (evicted) runs and the current one, less the
    periods it spent scaled to zero."""
    periods: list[Period] = []
    for begin, end in job.earlier_runs or []:
        a, b = parse_time(begin), parse_time(end)
        if a is not None and b is not None:
            periods.append((a, b))
    if job.started_at is not None:
        periods.append((job.started_at, job.finished_at or now))
    for gap_start, gap_end in scaled_down:
        periods = [
            piece
            for a, b in periods
            for piece in ((a, min(b, gap_start)), (max(a, gap_end), b))
            if piece[1] > piece[0]
        ]
    return periods


@dataclass
class Measured:
    """Prometheus's figures for the day, GPU-seconds per pod; ``error`` when it could not
    answer (then both are empty and nothing is known)."""

    used: dict[PodKey, float] = field(default_factory=dict)
    idle: dict[PodKey, float] = field(default_factory=dict)
    error: str = ""


def _measure(start: datetime, end: datetime, teams: Iterable[Team]) -> Measured:
    """Used and idle GPU-seconds per pod over [start, end), evaluated at ``end``: one query,
    and one per idle threshold in use (``monitoring.idleness``)."""
    step = int(settings.ACCOUNTING_STEP_SECONDS)
    lookback = (end - start).total_seconds()
    recorded = bool(settings.PROMETHEUS_RECORDING_RULES)
    timeout = float(settings.ACCOUNTING_PROMETHEUS_TIMEOUT)
    measured = Measured()
    if lookback < step:
        return measured  # the day began less than a step ago: nothing to integrate yet

    def key(sample: prometheus.Sample) -> PodKey:
        return (sample.labels.get("namespace", ""), sample.labels.get("pod", ""))

    try:
        used = prometheus.query(
            queries.used_gpu_seconds(lookback_seconds=lookback, step=step, recorded=recorded),
            at=end,
            timeout=timeout,
        )
        measured.used = {key(s): s.value or 0.0 for s in used}
        measured.idle = idle_gpu_seconds(
            teams=teams, lookback_seconds=lookback, step=step, at=end, timeout=timeout
        )
    except MetricsUnavailable as exc:
        logger.warning("GPU-hour rollup: used and idle GPU-hours unknown: %s", exc)
        return Measured(error=exc.reason)
    return measured


def _prices(day: date) -> dict[str, Decimal]:
    """Each product's price per GPU-hour on ``day``: its newest row in effect (a handful of
    rows; read in order, the later ones win)."""
    rows = GpuPrice.objects.filter(effective_from__lte=day).order_by("effective_from")
    return {row.product: row.price_per_gpu_hour for row in rows}


@dataclass(frozen=True)
class RollupResult:
    day: date
    jobs: int
    complete: bool
    measured: bool
    error: str
    seconds: float


def _day_jobs(start: datetime, end: datetime) -> list[Job]:
    """Jobs with GPUs that may have held them in [start, end): running then, or with an
    evicted run (a few; their periods decide), and those whose series may reach in."""
    started = Q(started_at__lt=end) | (~Q(earlier_runs=[]) & Q(created_at__lt=end))
    return list(
        Job.objects.filter(gpu_count__gt=0)
        .filter(started)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start - SERIES_GRACE))
        .select_related("team")
        .only(
            "id",
            "team",
            "owner",
            "namespace",
            "object_name",
            "kind",
            "spec",
            "placement",
            "gpu_count",
            "started_at",
            "finished_at",
            "earlier_runs",
        )
    )


def usage_rollup_day(*, day: date, now: datetime | None = None) -> RollupResult:
    """Roll up one day (see the module's docstring); safe to run again at any time.

    1. The day's jobs and their held periods (one query for the jobs, one for the timeline
       entries of deployments the idle policy scaled down).
    2. Prometheus: used and idle GPU-seconds per pod over the day (up to ``now`` for
       today), pods matched to jobs by name.
    3. One transaction: upsert a row per job that held GPUs (or did work) that day, delete
       the day's rows of jobs no longer in it, record the day in ``RollupDay``.
    """
    began = clock.perf_counter()
    now = now or timezone.now()
    start, end = day_bounds(day)
    if start >= now:
        raise ValueError(f"{day} has not begun yet; it cannot be rolled up.")
    until = min(end, now)
    jobs = _day_jobs(start, until)
    # A day no job held GPUs on has nothing to measure: Prometheus is not asked.
    measured = _measure(start, until, {job.team for job in jobs}) if jobs else Measured()
    rows = _day_rows(day, jobs, measured, now=now, start=start, until=until)
    complete = end <= now and not measured.error
    with transaction.atomic():
        GpuUsageDay.objects.bulk_create(
            rows,
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["day", "job"],
            update_fields=_ROW_FIELDS,
        )
        GpuUsageDay.objects.filter(day=day, job__isnull=False).exclude(
            job_id__in=[row.job_id for row in rows]
        ).delete()
        seconds = clock.perf_counter() - began
        RollupDay.objects.update_or_create(
            day=day,
            defaults={
                "complete": complete,
                "measured": not measured.error,
                "jobs": len(rows),
                "error": measured.error,
                "rolled_up_at": now,
                "seconds": seconds,
            },
        )
    return RollupResult(day, len(rows), complete, not measured.error, measured.error, seconds)


def _scaled_events(jobs: list[Job], until: datetime) -> dict[int, list[JobEvent]]:
    """The timeline entries of inference deployments the idle policy scaled to zero and
    back, per job (one query)."""
    scaled: dict[int, list[JobEvent]] = defaultdict(list)
    inference = [j.pk for j in jobs if j.kind == Job.Kind.INFERENCE]
    if inference:
        for event in JobEvent.objects.filter(
            job_id__in=inference, reason__in=("IdleStopped", "Resumed"), created_at__lt=until
        ).order_by("created_at", "id"):
            scaled[event.job_id].append(event)
    return scaled


def _day_rows(
    day: date,
    jobs: list[Job],
    measured: Measured,
    *,
    now: datetime,
    start: datetime,
    until: datetime,
) -> list[GpuUsageDay]:
    """A row per job that held GPUs (or did work) in [start, until): allocated from its
    held periods, used and idle from its pods' measurements, cost at the day's price."""
    scaled = _scaled_events(jobs, until)
    owners: dict[int, list[PodKey]] = defaultdict(list)
    for pod, job in pods_to_jobs(set(measured.used) | set(measured.idle), jobs).items():
        owners[job.pk].append(pod)
    prices = _prices(day)
    rows: list[GpuUsageDay] = []
    for job in jobs:
        periods = held_periods(job, now=now, scaled_down=_scaled_down(scaled[job.pk], now))
        allocated = job.gpu_count * _overlap(periods, start, until) / 3600
        pods = owners.get(job.pk, [])
        used = sum(measured.used.get(p, 0.0) for p in pods) / 3600 if pods else None
        idle = sum(measured.idle.get(p, 0.0) for p in pods) / 3600 if pods else None
        if allocated <= 0 and not used:
            continue
        if allocated > 0:
            # A step counts whole: a pod that started within the step's last seconds is
            # counted for all of it. Nothing is used, or idle, longer than it is held.
            used = None if used is None else min(used, allocated)
            idle = None if idle is None else min(idle, allocated)
        product = accounting_product(job)
        price = prices.get(product)
        rows.append(
            GpuUsageDay(
                day=day,
                job=job,
                job_name=job.object_name,
                team=job.team,
                user_id=job.owner_id,
                product=product,
                gpu_hours_allocated=allocated,
                gpu_hours_used=used,
                idle_gpu_hours=idle,
                cost=None
                if price is None
                else (Decimal(allocated) * price).quantize(Decimal("0.0001")),
                rolled_up_at=now,
            )
        )
    return rows


def _first_job_day() -> date | None:
    """The day the first job started (nothing to account before it)."""
    first = (
        Job.objects.filter(started_at__isnull=False)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    return None if first is None else timezone.localdate(first)


def rollup_days_due(*, now: datetime | None = None) -> list[date]:
    """The days the periodic rollup should do, oldest first: today (it grows), and every
    day of the last ``ACCOUNTING_BACKFILL_DAYS`` since the first job started that is not
    complete yet (never rolled up, rolled up before it ended, or without metrics)."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    first = _first_job_day()
    if first is None:
        return []
    since = max(first, today - timedelta(days=int(settings.ACCOUNTING_BACKFILL_DAYS)))
    done = set(
        RollupDay.objects.filter(day__gte=since, day__lt=today, complete=True).values_list(
            "day", flat=True
        )
    )
    days = [since + timedelta(days=n) for n in range((today - since).days)]
    return [d for d in days if d not in done] + [today]


def usage_rollup(*, now: datetime | None = None, limit: int | None = None) -> list[RollupResult]:
    """The periodic rollup: the days due (at most ``limit`` of the past ones per run, the
    oldest first, so a long backfill is spread over several runs), then today."""
    now = now or timezone.now()
    days = rollup_days_due(now=now)
    past, today = days[:-1], days[-1:]
    if limit is not None:
        past = past[:limit]
    return [usage_rollup_day(day=day, now=now) for day in [*past, *today]]


def rollup_summary(results: list[RollupResult]) -> dict[str, Any]:
    return {
        "days": [r.day.isoformat() for r in results],
        "jobs": sum(r.jobs for r in results),
        "incomplete": [r.day.isoformat() for r in results if not r.complete],
    }


# --- The monthly summary ---------------------------------------------------------------

SUMMARY_DAYS = 7  # the first days of a month in which last month's summary may still go


def _hours(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.1f}"


def _line(row: ReportRow, currency: str) -> str:
    efficiency = "unknown" if row.efficiency is None else f"{row.efficiency:.0%}"
    cost = "" if row.cost is None else f", {row.cost:,.2f} {currency}"
    return (
        f"{_hours(row.gpu_hours_allocated)} GPU-h allocated, {_hours(row.gpu_hours_used)} used "
        f"({efficiency} efficiency), {_hours(row.idle_gpu_hours)} idle{cost}"
    )


def _summary_notice(summary: TeamSummary, lead_id: int, start: date, end: date) -> Notice:
    team = summary.team
    month = f"{start:%B %Y}"
    currency = settings.ACCOUNTING_CURRENCY
    link = (
        f"{settings.PORTAL_URL}/monitoring/reports/?period=custom&start={start}&end={end}"
        f"&team={team.slug}"
    )
    lines = [f"Team {team.slug}, {month}: {_line(summary.totals, currency)}.", "", "By user:"]
    lines += [f"- {row.user}: {_line(row, currency)}" for row in summary.users]
    if summary.wasted:
        lines += ["", "Most GPU-hours held idle:"]
        lines += [
            f"- {row.job_name} ({row.user}): {_hours(row.idle_gpu_hours)} idle GPU-h "
            f"of {_hours(row.gpu_hours_allocated)}"
            for row in summary.wasted
        ]
    lines += ["", f"The report: {link}"]
    totals = summary.totals
    return Notice(
        key=f"report.monthly:{team.pk}:{start:%Y-%m}",
        event="report.monthly",
        user_id=lead_id,
        team_id=team.pk,
        subject=f"GPU-hours of team {team.slug} in {month}",
        body="\n".join(lines),
        payload={
            "team": team.slug,
            "month": f"{start:%Y-%m}",
            "gpu_hours_allocated": totals.gpu_hours_allocated,
            "gpu_hours_used": totals.gpu_hours_used,
            "efficiency": totals.efficiency,
            "idle_gpu_hours": totals.idle_gpu_hours,
            "cost": None if totals.cost is None else str(totals.cost),
            "currency": currency,
            "url": link,
        },
    )


def monthly_summary_send(*, now: datetime | None = None) -> list[int]:
    """Last month's GPU-hours, per team, to the team's leads (event ``report.monthly``).

    Sent in the first ``SUMMARY_DAYS`` days of a month, once every day of last month since
    the first job started is rolled up complete; once per lead and team (the notice's key
    is the team and month, so running it again sends nothing). Returns the deliveries made.
    """
    now = now or timezone.now()
    today = timezone.localdate(now)
    if today.day > SUMMARY_DAYS:
        return []
    end = today.replace(day=1) - timedelta(days=1)
    start = end.replace(day=1)
    first = _first_job_day()
    if first is None or first > end:
        return []
    since = max(start, first)
    complete = RollupDay.objects.filter(day__gte=since, day__lte=end, complete=True).count()
    if complete < (end - since).days + 1:
        logger.info("monthly summary for %s waits: the month is not rolled up yet", start)
        return []
    created: list[int] = []
    teams = Team.objects.filter(usage_days__day__gte=start, usage_days__day__lte=end).distinct()
    for team in teams:
        summary = team_summary_get(team=team, start=start, end=end)
        leads = Membership.objects.filter(team=team, role=Membership.Role.LEAD).values_list(
            "user_id", flat=True
        )
        for lead_id in leads:
            created += notice_publish(notice=_summary_notice(summary, lead_id, start, end))
    return created
