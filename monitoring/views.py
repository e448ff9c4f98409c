"""GPU dashboard pages. Prometheus or the cluster being down shows a panel saying so;
the page itself still renders (200)."""

from __future__ import annotations

import hmac
from datetime import date, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cluster.selectors import clusters_list
from core.errors import ApplicationError
from jobs.selectors.jobs import job_get_for_user
from monitoring import charts, metrics
from monitoring.queries import RANGES, RangeError, parse_range
from monitoring.selectors.cluster import cluster_overview_get
from monitoring.selectors.cohort import cohort_usage_get
from monitoring.selectors.job import job_gpus_get
from monitoring.selectors.reports import (
    GROUPS,
    gpu_hours_report,
    period_check,
    report_rows,
    rollup_schedule_get,
    top_wasted_jobs,
)
from monitoring.selectors.team import team_usage_get
from teams.selectors import team_get_for_user, teams_for_user

# htmx stops polling when a response has this status (the job is over: its charts are final).
HTMX_STOP_POLLING = 286


def _figure_list(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure's element id and its JSON, escaped for a ``<script>`` data block; a figure
    with nothing to draw is said in a sentence (``empty``) instead of blank axes."""
    return [
        {
            "id": f"fig-{key}",
            "title": charts.figure_title(fig),
            "empty": charts.figure_is_empty(fig),
            "json": mark_safe(charts.figure_json(fig)),  # noqa: S308 - escaped
        }
        for key, fig in figures.items()
    ]


def _refreshing(request: HttpRequest, target: str) -> bool:
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and getattr(htmx, "target", None) == target


def _bad_range(exc: RangeError) -> HttpResponse:
    return HttpResponseBadRequest(f"range: {exc}", content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def cluster_overview(request: HttpRequest) -> HttpResponse:
    try:
        range_key, _ = parse_range(request.GET.get("range"))
    except RangeError as exc:
        return _bad_range(exc)
    overview = cluster_overview_get(user=request.user, range_key=range_key)
    context = {
        "overview": overview,
        "figures": _figure_list(charts.cluster_figures(overview)),
        "ranges": list(RANGES),
        "range_key": range_key,
        "prometheus_url": settings.PROMETHEUS_URL,
        "clusters": clusters_list(),
    }
    if _refreshing(request, "cluster-panels"):
        return render(request, "monitoring/_cluster_panels.html", context)
    return render(request, "monitoring/cluster.html", context)


@login_required
@require_GET
def team_usage_page(request: HttpRequest, slug: str) -> HttpResponse:
    try:
        range_key, _ = parse_range(request.GET.get("range"))
    except RangeError as exc:
        return _bad_range(exc)
    team = team_get_for_user(user=request.user, slug=slug)
    usage = team_usage_get(team=team, user=request.user, range_key=range_key)
    cohort = (
        cohort_usage_get(user=request.user, slug=team.cohort.slug, range_key=range_key)
        if team.cohort is not None
        else None
    )
    context = {
        "team": team,
        "usage": usage,
        "cohort": cohort,
        "figures": _figure_list(charts.team_figures(usage)),
        "sharing_figures": _figure_list(charts.team_sharing_figures(usage, cohort))
        if cohort
        else [],
        "ranges": list(RANGES),
        "range_key": range_key,
        "prometheus_url": settings.PROMETHEUS_URL,
    }
    if _refreshing(request, "team-panels"):
        return render(request, "monitoring/_team_panels.html", context)
    return render(request, "monitoring/team.html", context)


@login_required
@require_GET
def cohort_usage(request: HttpRequest, slug: str) -> HttpResponse:
    try:
        range_key, _ = parse_range(request.GET.get("range"))
    except RangeError as exc:
        return _bad_range(exc)
    usage = cohort_usage_get(user=request.user, slug=slug, range_key=range_key)
    context = {
        "usage": usage,
        "figures": _figure_list(charts.cohort_figures(usage)),
        "ranges": list(RANGES),
        "range_key": range_key,
    }
    if _refreshing(request, "cohort-panels"):
        return render(request, "monitoring/_cohort_panels.html", context)
    return render(request, "monitoring/cohort.html", context)


@login_required
@require_GET
def job_gpus_partial(request: HttpRequest, job_id: int) -> HttpResponse:
    """The job's GPU charts, for ``hx-get`` from the job page (see ``job.html``)."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    try:
        seconds = parse_range(request.GET["range"])[1] if request.GET.get("range") else None
    except RangeError as exc:
        return _bad_range(exc)
    result = job_gpus_get(job=job, range_seconds=seconds)
    response = render(
        request,
        "monitoring/_job_gpus.html",
        {
            "result": result,
            "figures": _figure_list(charts.job_figures(result)),
            "prometheus_url": settings.PROMETHEUS_URL,
        },
    )
    if job.is_final and result.metrics_error is None and getattr(request, "htmx", False):
        response.status_code = HTMX_STOP_POLLING
    return response


@login_required
@require_GET
def job_gpus_page(request: HttpRequest, job_id: int) -> HttpResponse:
    """A page of its own around the partial (and the way the job page embeds it)."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    return render(request, "monitoring/job.html", {"job": job})


PERIODS = {"month": "A month", "30d": "Last 30 days", "custom": "Custom"}


def _month(value: str, today: date) -> date:
    """The first day of a ``YYYY-MM`` month (empty: this month)."""
    if not value:
        return today.replace(day=1)
    try:
        year, month = (int(part) for part in value.split("-"))
        if not 1 <= year < date.max.year:
            raise ValueError(year)
        return date(year, month, 1)
    except ValueError as exc:
        raise ApplicationError(
            f"month: {value!r} is not a month; write it as YYYY-MM (e.g. {today:%Y-%m}).",
            field_errors={"month": ["Write the month as YYYY-MM."]},
        ) from exc


def _day(name: str, value: str) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise ApplicationError(
            f"{name}: {value!r} is not a day; write it as YYYY-MM-DD.",
            field_errors={name: ["Write the day as YYYY-MM-DD."]},
        ) from exc


def report_period(params: dict[str, str], today: date) -> tuple[str, date, date]:
    """The page's period picker: a month (default: this one), the last 30 days, or custom
    days (both included). Raises ``ApplicationError`` naming the field."""
    period = params.get("period") or "month"
    if period not in PERIODS:
        raise ApplicationError(
            f"period: must be one of {', '.join(PERIODS)} (got {period!r}).",
            field_errors={"period": [f"Choose one of {', '.join(PERIODS)}."]},
        )
    if period == "30d":
        return period, today - timedelta(days=29), today
    if period == "custom":
        start, end = period_check(
            _day("start", params.get("start", "")), _day("end", params.get("end", ""))
        )
        return period, start, end
    first = _month(params.get("month", ""), today)
    following = (first + timedelta(days=32)).replace(day=1)
    return period, first, following - timedelta(days=1)


@login_required
@require_GET
def reports(request: HttpRequest) -> HttpResponse:
    """GPU-hours allocated vs used per team and user over a period, stacked by team per
    day, the jobs that wasted most, and CSV downloads (the API's own CSV: same numbers)."""
    today = timezone.localdate()
    params = request.GET.dict()
    # The picker shows what was asked for (what was shown, once it is valid).
    form = {
        "period": params.get("period") or "month",
        "month": params.get("month") or f"{today:%Y-%m}",
        "start": params.get("start", ""),
        "end": params.get("end", ""),
        "team": params.get("team", ""),
    }
    context: dict[str, Any] = {
        "periods": PERIODS,
        "form": form,
        "teams": teams_for_user(user=request.user).order_by("slug"),
    }
    try:
        period, start, end = report_period(params, today)
        team_slug = params.get("team") or None
        report = gpu_hours_report(
            user=request.user, start=start, end=end, team_slug=team_slug, group_by="team"
        )
    except ApplicationError as exc:
        if exc.status_code == 404:
            raise
        context["error"] = str(exc)
        return render(request, "monitoring/reports.html", context, status=400)
    days = [start + timedelta(days=n) for n in range((end - start).days + 1)]
    by_product = report_rows(user=request.user, report=report, group_by="product")
    query = {"start": str(start), "end": str(end), **({"team": team_slug} if team_slug else {})}
    api = reverse("api-reports-gpu-hours")
    if period == "custom":
        form |= {"start": str(start), "end": str(end)}
    context.update(
        {
            "report": report,
            "by_user": report_rows(user=request.user, report=report, group_by="user"),
            "by_product": by_product,
            "wasted": top_wasted_jobs(user=request.user, start=start, end=end, team=report.team),
            "figures": _figure_list(
                charts.report_figures(
                    report_rows(user=request.user, report=report, group_by="day"), days
                )
            ),
            "csv": {
                group: f"{api}?{urlencode({**query, 'group_by': group, 'format': 'csv'})}"
                for group in GROUPS
            },
            "shared": any(p.product and p.product.startswith("shared:") for p in by_product),
            "schedule": rollup_schedule_get(),
            "empty_text": (
                "nothing is rolled up for this period yet."
                if report.nothing_rolled_up
                else "no GPU-hours in this period."
            ),
        }
    )
    return render(request, "monitoring/reports.html", context)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The portal's own metrics for Prometheus (``METRICS_TOKEN`` guards it when set)."""
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if token and not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        return HttpResponse("unauthorized\n", status=401, content_type="text/plain")
    return HttpResponse(generate_latest(metrics.registry()), content_type=CONTENT_TYPE_LATEST)
