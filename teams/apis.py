"""REST API for the caller: who am I, and which teams may I submit to."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_errors import error_responses
from core.queueing import Queueing
from teams.selectors import team_roles_for_user


class MeTeamOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    role = serializers.ChoiceField(choices=["member", "lead"])


class MeOutput(serializers.Serializer):
    username = serializers.CharField()
    is_platform_admin = serializers.BooleanField(
        help_text="Platform admins see every team and act as its lead."
    )
    teams = MeTeamOutput(many=True)
    queueing = serializers.ChoiceField(
        choices=Queueing.choices,
        help_text="Who admits new jobs against the teams' quotas: the portal's own engine, "
        "or Kueue (docs/queueing.md).",
    )


class MeApi(APIView):
    """Who the token belongs to: a client checks its token and finds the team slugs it may
    submit to, without reading quotas."""

    @extend_schema(operation_id="me_retrieve", responses={200: MeOutput, **error_responses(401)})
    def get(self, request: Request) -> Response:
        user = request.user
        teams = [
            {
                "slug": entry.team.slug,
                "name": entry.team.name,
                "namespace": entry.team.namespace,
                "role": entry.role,
            }
            for entry in team_roles_for_user(user=user)  # type: ignore[arg-type]
        ]
        return Response(
            MeOutput(
                {
                    "username": user.get_username(),
                    "is_platform_admin": user.is_superuser,
                    "teams": teams,
                    "queueing": settings.QUEUEING,
                }
            ).data
        )
