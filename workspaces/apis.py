"""The workspaces' REST API (docs/workspaces.md, docs/api.md): list the images, create, list,
get, stop, start and delete workspaces. A workspace is also a job: ``/api/v1/jobs/`` lists
it, with its events, logs and manifests, as any other."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_errors import error_responses
from core.apis import ApiView, QueryText
from core.errors import ApplicationError
from jobs.apis import TEMPLATE_PARAMETER, JobOutput, spec_from_request
from jobs.manifests.naming import home_claim_name
from jobs.models import LIVE_STATES, Job, WorkspaceImage
from jobs.selectors.jobs import job_get_for_user, jobs_for_user
from jobs.services.submit import job_submit
from jobs.spec_input import WorkspaceSpecInput
from workspaces.selectors import WorkspaceRights, workspace_rights
from workspaces.services import (
    workspace_delete,
    workspace_start,
    workspace_stop,
    workspace_url,
)


class WorkspaceImageOutput(serializers.ModelSerializer):
    class Meta:
        model = WorkspaceImage
        fields = ["name", "title", "description", "flavor", "image", "port", "home_path"]
        read_only_fields = fields


class WorkspaceOutput(JobOutput):
    """A workspace: the job's fields, where to open it, its image and its home claim."""

    url = serializers.CharField(
        help_text="Where its owner opens it, through the portal (/workspaces/<id>/)."
    )
    workspace_image = serializers.CharField()
    home_claim = serializers.CharField(
        help_text="The owner's home folder in the team (a PersistentVolumeClaim)."
    )
    can_open = serializers.BooleanField(help_text="Whether the caller may open it.")

    class Meta(JobOutput.Meta):
        fields = [*JobOutput.Meta.fields, "url", "workspace_image", "home_claim", "can_open"]
        read_only_fields = fields

    def _rights(self, user: Any, job: Job) -> WorkspaceRights:
        """The caller's rights: worked out for the whole page by the list, else here."""
        known = self.context.get("rights") or {}
        return known.get(job.pk) or workspace_rights(user=user, jobs=[job])[job.pk]

    def job_fields(self, job: Job) -> dict[str, Any]:
        request = self.context.get("request")
        user = getattr(request, "user", None)
        return {
            **super().job_fields(job),
            "url": request.build_absolute_uri(workspace_url(job))
            if request
            else workspace_url(job),
            "workspace_image": job.spec.get("workspace_image") or "",
            "home_claim": home_claim_name(job.owner.username),
            "can_open": user is not None and self._rights(user, job).open,
        }


def _workspace(request: Request, job_id: int) -> Job:
    """A workspace of the user's teams; another team's, or a job of another kind, is not
    one of the workspaces: 404."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    if job.kind != Job.Kind.WORKSPACE:
        raise NotFound("No such workspace.")
    return job


class WorkspaceListQuery(serializers.Serializer):
    team = QueryText(required=False, allow_blank=True, max_length=50, help_text="Team slug")
    owner = QueryText(
        required=False, allow_blank=True, max_length=150, help_text="The owner's username"
    )


class WorkspaceImageListApi(APIView):
    @extend_schema(
        operation_id="workspace_images_list",
        responses={200: WorkspaceImageOutput(many=True), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        images = WorkspaceImage.objects.filter(enabled=True)
        return Response(WorkspaceImageOutput(images, many=True).data)


class WorkspaceListCreateApi(ApiView):
    query_input = WorkspaceListQuery

    @extend_schema(
        operation_id="workspaces_list",
        responses={200: WorkspaceOutput(many=True), **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        """The workspaces of the caller's teams (not deleted), newest first."""
        found = (
            jobs_for_user(
                user=request.user,
                team=self.query.get("team") or None,
                kind=Job.Kind.WORKSPACE,
                owner=self.query.get("owner") or None,
            )
            .filter(state__in=LIVE_STATES)
            .defer("manifests", "demand")[:500]
        )
        rights = workspace_rights(user=request.user, jobs=found)
        context = {"request": request, "rights": rights}
        return Response(WorkspaceOutput(found, many=True, context=context).data)

    @extend_schema(
        operation_id="workspaces_create",
        request={"application/json": WorkspaceSpecInput},
        parameters=[TEMPLATE_PARAMETER],
        responses={201: WorkspaceOutput, **error_responses(400, 401, 404, 413, 415, 429)},
    )
    def post(self, request: Request) -> Response:
        """Create a workspace: a job spec whose ``kind`` is ``workspace`` (the default here)."""
        data = spec_from_request(request)
        if isinstance(data, dict) and "kind" not in data:
            data = {**data, "kind": "workspace"}
        if isinstance(data, dict) and data.get("kind") != "workspace":
            raise ApplicationError(
                "kind: this endpoint creates workspaces; send kind workspace (or none), or "
                "POST other kinds to /api/v1/jobs/.",
                field_errors={"kind": ["Use workspace."]},
            )
        job = job_submit(user=request.user, data=data)  # type: ignore[arg-type]
        return Response(
            WorkspaceOutput(job, context={"request": request}).data,
            status=status.HTTP_201_CREATED,
        )


class WorkspaceDetailApi(APIView):
    @extend_schema(
        operation_id="workspaces_retrieve",
        responses={200: WorkspaceOutput, **error_responses(401, 404)},
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = _workspace(request, job_id)
        return Response(WorkspaceOutput(job, context={"request": request}).data)

    @extend_schema(
        operation_id="workspaces_destroy",
        parameters=[
            OpenApiParameter(
                "delete_home",
                OpenApiTypes.BOOL,
                required=False,
                description="Also delete the owner's home folder in the team (refused while "
                "another of their workspaces uses it). Default: kept.",
            )
        ],
        responses={200: WorkspaceOutput, **error_responses(401, 403, 404, 409, 503)},
    )
    def delete(self, request: Request, job_id: int) -> Response:
        job = _workspace(request, job_id)
        delete_home = request.query_params.get("delete_home", "").lower() in ("1", "true", "yes")
        job = workspace_delete(
            user=request.user,  # type: ignore[arg-type]
            job_id=job.pk,
            delete_home=delete_home,
        )
        return Response(WorkspaceOutput(job, context={"request": request}).data)


class WorkspaceStopApi(APIView):
    @extend_schema(
        operation_id="workspaces_stop",
        request=None,
        responses={200: WorkspaceOutput, **error_responses(401, 403, 404, 409, 429)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        """Stop it: its pod goes and its GPUs are freed; its home folder is kept."""
        job = _workspace(request, job_id)
        job = workspace_stop(user=request.user, job_id=job.pk)  # type: ignore[arg-type]
        return Response(WorkspaceOutput(job, context={"request": request}).data)


class WorkspaceStartApi(APIView):
    @extend_schema(
        operation_id="workspaces_start",
        request=None,
        responses={200: WorkspaceOutput, **error_responses(401, 403, 404, 409, 429)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        """Start a stopped workspace again: it queues for quota like a new one."""
        job = _workspace(request, job_id)
        job = workspace_start(user=request.user, job_id=job.pk)  # type: ignore[arg-type]
        return Response(WorkspaceOutput(job, context={"request": request}).data)
