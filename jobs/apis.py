"""REST API for jobs: thin views that parse input, call one service or selector, render."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.manifests import to_yaml
from jobs.models import Job, JobState
from jobs.selectors import job_get_for_user, jobs_for_user
from jobs.services import job_cancel, job_preview, job_submit
from jobs.spec_input import JobSpecInput
from portal.pagination import paginate


class JobOutput(serializers.ModelSerializer):
    """A job as the API returns it: identity, state and the spec fields."""

    team = serializers.CharField(source="team.slug")
    owner = serializers.CharField(source="owner.username")
    spec = serializers.JSONField()

    class Meta:
        model = Job
        fields = [
            "id",
            "team",
            "name",
            "kind",
            "owner",
            "state",
            "reason",
            "message",
            "priority",
            "gpu_count",
            "namespace",
            "object_name",
            "spec",
            "created_at",
            "admitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Job) -> dict[str, Any]:
        data = super().to_representation(instance)
        # The spec fields also sit at the top level, as clients sent them.
        for key, value in instance.spec.items():
            data.setdefault(key, value)
        return data


class PreviewOutput(serializers.Serializer):
    valid = serializers.BooleanField()
    manifests = serializers.ListField(child=serializers.DictField())
    yaml = serializers.CharField()
    resource_defaults = serializers.DictField()


class JobListCreateApi(APIView):
    @extend_schema(
        operation_id="jobs_list",
        parameters=[
            OpenApiParameter("team", str, description="Team slug"),
            OpenApiParameter("state", str, enum=[s.value for s in JobState]),
            OpenApiParameter("kind", str, enum=[k.value for k in Job.Kind]),
            OpenApiParameter("page", int),
        ],
        responses=JobOutput(many=True),
    )
    def get(self, request: Request) -> Response:
        jobs = jobs_for_user(
            user=request.user,
            team=request.query_params.get("team") or None,
            state=request.query_params.get("state") or None,
            kind=request.query_params.get("kind") or None,
        )
        return paginate(request=request, queryset=jobs, serializer_class=JobOutput, view=self)

    @extend_schema(operation_id="jobs_create", request=JobSpecInput, responses={201: JobOutput})
    def post(self, request: Request) -> Response:
        job = job_submit(user=request.user, data=request.data)  # type: ignore[arg-type]
        return Response(JobOutput(job).data, status=status.HTTP_201_CREATED)


class JobDetailApi(APIView):
    @extend_schema(operation_id="jobs_retrieve", responses=JobOutput)
    def get(self, request: Request, job_id: int) -> Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        return Response(JobOutput(job).data)


class JobPreviewApi(APIView):
    @extend_schema(operation_id="jobs_preview", request=JobSpecInput, responses=PreviewOutput)
    def post(self, request: Request) -> Response:
        preview = job_preview(user=request.user, data=request.data)
        return Response(
            {
                "valid": True,
                "manifests": preview.manifests,
                "yaml": preview.yaml,
                "resource_defaults": preview.defaults,
            }
        )


class JobManifestApi(APIView):
    @extend_schema(
        operation_id="jobs_manifest",
        parameters=[
            OpenApiParameter(
                "format", str, enum=["yaml", "json"], description="yaml (default) or json"
            )
        ],
        responses={
            (200, "text/yaml"): OpenApiResponse(OpenApiTypes.STR),
            (200, "application/json"): OpenApiResponse(
                inline_serializer("ManifestList", {"items": serializers.ListField()})
            ),
        },
    )
    def get(self, request: Request, job_id: int) -> HttpResponse | Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        if request.query_params.get("format") == "json":
            return Response(job.manifests)
        return HttpResponse(to_yaml(job.manifests), content_type="text/yaml; charset=utf-8")


class JobCancelApi(APIView):
    @extend_schema(operation_id="jobs_cancel", request=None, responses=JobOutput)
    def post(self, request: Request, job_id: int) -> Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        job = job_cancel(user=request.user, job_id=job.pk)  # type: ignore[arg-type]
        return Response(JobOutput(job).data)
