"""GPU dashboard pages. Prometheus or the cluster being down shows a panel saying so;
the page itself still renders (200)."""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobs.selectors import job_get_for_user
from monitoring import charts, metrics
from monitoring.queries import RANGES, RangeError, parse_range
from monitoring.selectors.cluster import cluster_overview_get
from monitoring.selectors.cohort import cohort_usage_get
from monitoring.selectors.job import job_gpus_get
from monitoring.selectors.team import team_usage_get
from teams.selectors import team_get_for_user

# htmx stops polling when a response has this status (the job is over: its charts are final).
HTMX_STOP_POLLING = 286


def _figure_list(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure's element id and its JSON, escaped for a ``<script>`` data block."""
    return [
        {"id": f"fig-{key}", "json": mark_safe(charts.figure_json(fig))}  # noqa: S308 - escaped
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
    }
    if _refreshing(request, "cluster-panels"):
        return render(request, "monitoring/_cluster_panels.html", context)
    return render(request, "monitoring/cluster.html", context)


@login_required
@require_GET
def team_usage(request: HttpRequest, slug: str) -> HttpResponse:
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


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The portal's own metrics for Prometheus (``METRICS_TOKEN`` guards it when set)."""
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if token and not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        return HttpResponse("unauthorized\n", status=401, content_type="text/plain")
    return HttpResponse(generate_latest(metrics.registry()), content_type=CONTENT_TYPE_LATEST)
