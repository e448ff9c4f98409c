"""The notification settings page: the user's channels, and their teams' for leads."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from core.errors import ApplicationError
from notifications import selectors, services
from notifications.events import EVENTS
from notifications.models import Destination
from teams.models import Membership
from teams.selectors import team_roles_for_user


def _changes(request: HttpRequest, channels: tuple[str, ...]) -> list[services.ChannelSettings]:
    return [
        services.ChannelSettings(
            channel=channel,
            target=request.POST.get(f"{channel}-target", ""),
            events=request.POST.getlist(f"{channel}-events"),
            rotate_secret=request.POST.get(f"{channel}-rotate") == "on",
        )
        for channel in channels
    ]


def _rows(destinations: list[Destination]) -> list[dict[str, Any]]:
    return [
        {
            "destination": d,
            "events": [(e.key, e.label, e.key in d.events) for e in EVENTS],
        }
        for d in destinations
    ]


@login_required
def notification_settings(request: HttpRequest) -> HttpResponse:
    user: User = request.user  # type: ignore[assignment]
    led = [
        entry.team for entry in team_roles_for_user(user=user) if entry.role == Membership.Role.LEAD
    ]
    if request.method == "POST":
        scope = request.POST.get("scope", "me")
        try:
            if scope == "me":
                services.user_settings_update(
                    user=user, changes=_changes(request, selectors.USER_CHANNELS)
                )
                messages.success(request, "Your notification settings are saved.")
            else:
                team = next((t for t in led if f"team:{t.slug}" == scope), None)
                if team is None:
                    raise ApplicationError("Only a team's leads set its notifications.")
                services.team_settings_update(
                    user=user, team=team, changes=_changes(request, selectors.TEAM_CHANNELS)
                )
                messages.success(request, f"Team {team.slug}'s notification settings are saved.")
        except ApplicationError as exc:
            messages.error(request, f"Not saved: {exc.message}")
        else:
            return redirect("notification-settings")
    return render(
        request,
        "notifications/settings.html",
        {
            "events": EVENTS,
            "mine": _rows(selectors.user_destinations(user=user)),
            "teams": [(t, _rows(selectors.team_destinations(team=t))) for t in led],
        },
    )
