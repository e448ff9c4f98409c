"""Portal pages: the user's teams with quota use, and a health check."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from jobs.selectors import queued_count, quota_usage
from portal.selectors import membership_role, teams_for_user


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    teams = [
        {
            "team": team,
            "role": membership_role(user=request.user, team=team),
            "quotas": quota_usage(team=team),
            "queued": queued_count(team=team),
        }
        for team in teams_for_user(user=request.user)
    ]
    return render(request, "portal/teams.html", {"teams": teams})


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness/readiness for load balancers: the process answers and the database does."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any database failure means "not ready"
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})
