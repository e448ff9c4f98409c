"""REST API: which events reach a user (or a team) on which channel, and where."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_errors import error_responses
from core.apis import JsonBoolean
from notifications import selectors, services
from notifications.events import EVENT_KEYS, EVENTS
from notifications.models import Channel, Destination
from teams.selectors import team_get_for_user


class EventOutput(serializers.Serializer):
    key = serializers.CharField()
    # The JSON name is fixed; DRF's metaclass moves it out of the attribute it shadows.
    label = serializers.CharField()  # type: ignore[assignment]


class ChannelOutput(serializers.Serializer):
    channel = serializers.ChoiceField(choices=Channel.choices)
    target = serializers.CharField(
        allow_blank=True,
        help_text="The webhook's or Slack's URL; for email an address (blank: the account's).",
    )
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_KEYS))
    secret = serializers.CharField(
        allow_blank=True,
        help_text="Webhooks only: the HMAC-SHA256 key of X-GPU-Portal-Signature.",
    )
    last_status = serializers.CharField(allow_blank=True)
    last_error = serializers.CharField(allow_blank=True)
    last_attempt_at = serializers.DateTimeField(allow_null=True)


class SettingsOutput(serializers.Serializer):
    events = EventOutput(many=True)
    channels = ChannelOutput(many=True)


class ChannelInput(serializers.Serializer):
    channel = serializers.ChoiceField(choices=Channel.choices)
    target = serializers.CharField(
        max_length=500, required=False, allow_blank=True, trim_whitespace=True
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_KEYS), required=False
    )
    rotate_secret = JsonBoolean(
        default=False, help_text="Webhooks: a new signing secret (the old one stops working)."
    )


class SettingsInput(serializers.Serializer):
    channels = ChannelInput(many=True)


def _channel_data(destination: Destination) -> dict[str, Any]:
    return {
        "channel": destination.channel,
        "target": destination.target
        or (
            destination.user.email
            if destination.channel == Channel.EMAIL and destination.user
            else ""
        ),
        "events": list(destination.events),
        "secret": destination.secret if destination.channel == Channel.WEBHOOK else "",
        "last_status": destination.last_status,
        "last_error": destination.last_error,
        "last_attempt_at": destination.last_attempt_at,
    }


def _settings_data(destinations: list[Destination]) -> dict[str, Any]:
    return SettingsOutput(
        {
            "events": [{"key": e.key, "label": e.label} for e in EVENTS],
            "channels": [_channel_data(d) for d in destinations],
        }
    ).data


def _changes(request: Request) -> list[services.ChannelSettings]:
    data = SettingsInput(data=request.data)
    data.is_valid(raise_exception=True)
    return [
        services.ChannelSettings(
            channel=item["channel"],
            target=item.get("target"),
            events=item.get("events"),
            rotate_secret=item["rotate_secret"],
        )
        for item in data.validated_data["channels"]
    ]


class NotificationSettingsApi(APIView):
    @extend_schema(
        operation_id="notifications_retrieve",
        responses={200: SettingsOutput, **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        user: User = request.user  # type: ignore[assignment]
        return Response(_settings_data(selectors.user_destinations(user=user)))

    @extend_schema(
        operation_id="notifications_update",
        request=SettingsInput,
        responses={200: SettingsOutput, **error_responses(400, 401, 415, 429)},
    )
    def put(self, request: Request) -> Response:
        user: User = request.user  # type: ignore[assignment]
        services.user_settings_update(user=user, changes=_changes(request))
        return Response(_settings_data(selectors.user_destinations(user=user)))


class TeamNotificationSettingsApi(APIView):
    @extend_schema(
        operation_id="teams_notifications_retrieve",
        responses={200: SettingsOutput, **error_responses(401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        team = team_get_for_user(user=request.user, slug=slug)
        return Response(_settings_data(selectors.team_destinations(team=team)))

    @extend_schema(
        operation_id="teams_notifications_update",
        request=SettingsInput,
        responses={200: SettingsOutput, **error_responses(400, 401, 403, 404, 415, 429)},
    )
    def put(self, request: Request, slug: str) -> Response:
        team = team_get_for_user(user=request.user, slug=slug)
        services.team_settings_update(
            user=request.user,  # type: ignore[arg-type]
            team=team,
            changes=_changes(request),
        )
        return Response(_settings_data(selectors.team_destinations(team=team)))
