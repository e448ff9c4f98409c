"""Reads: a user's or a team's channels as the settings page and the API show them."""

from __future__ import annotations

from django.contrib.auth.models import User

from notifications.events import DEFAULT_EVENTS
from notifications.models import Channel, Destination
from teams.models import Team

USER_CHANNELS = (Channel.EMAIL, Channel.WEBHOOK, Channel.SLACK)
TEAM_CHANNELS = (Channel.WEBHOOK, Channel.SLACK)


def _with_defaults(
    found: dict[str, Destination], channels: tuple[str, ...], **owner: object
) -> list[Destination]:
    # Channels never saved are shown as they behave: email on with the default events,
    # the others off.
    return [
        found.get(channel)
        or Destination(
            channel=channel,
            events=list(DEFAULT_EVENTS) if channel == Channel.EMAIL else [],
            **owner,
        )
        for channel in channels
    ]


def user_destinations(*, user: User) -> list[Destination]:
    found = {d.channel: d for d in Destination.objects.filter(user=user)}
    return _with_defaults(found, USER_CHANNELS, user=user)


def team_destinations(*, team: Team) -> list[Destination]:
    found = {d.channel: d for d in Destination.objects.filter(team=team)}
    return _with_defaults(found, TEAM_CHANNELS, team=team)
