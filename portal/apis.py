"""REST API for teams: the user's teams with each quota's limit and current use."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.selectors import queued_count, quota_usage
from portal.api_errors import error_responses
from portal.selectors import membership_role, teams_for_user


class QuotaOutput(serializers.Serializer):
    resource = serializers.CharField()
    limit = serializers.IntegerField()
    used = serializers.IntegerField()
    percent = serializers.IntegerField()


class TeamOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    role = serializers.CharField(allow_null=True)
    queued_jobs = serializers.IntegerField()
    quotas = QuotaOutput(many=True)


class TeamListApi(APIView):
    @extend_schema(
        operation_id="teams_list", responses={200: TeamOutput(many=True), **error_responses(401)}
    )
    def get(self, request: Request) -> Response:
        teams = [
            {
                "slug": team.slug,
                "name": team.name,
                "namespace": team.namespace,
                "role": membership_role(user=request.user, team=team),
                "queued_jobs": queued_count(team=team),
                "quotas": quota_usage(team=team),
            }
            for team in teams_for_user(user=request.user)
        ]
        return Response(TeamOutput(teams, many=True).data)
