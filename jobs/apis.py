"""REST API for jobs, and for teams with what their jobs hold of each quota.

Thin views that parse input, call one service or selector, render.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_errors import error_responses
from core.apis import ApiView, QueryText
from jobs.manifests import to_yaml
from jobs.models import Job, JobEvent, JobState, JobTemplate
from jobs.selectors import cohorts as cohort_selectors
from jobs.selectors import templates as template_selectors
from jobs.selectors.jobs import (
    JOB_LIST_PAGE_SIZE,
    job_cluster_name,
    job_events,
    job_get_for_user,
    job_output,
    jobs_for_user,
    jobs_in_order,
    queued_count,
    quota_usage_every_cluster,
)
from jobs.selectors.live import MAX_LOG_TAIL, job_log_tail
from jobs.selectors.queue_position import job_queue_position
from jobs.services import templates as template_services
from jobs.services.idle import idle_exempt_check, job_idle_exempt, job_resume
from jobs.services.submit import job_cancel, job_preview, job_submit
from jobs.spec_input import JobSpecInput
from teams.selectors import membership_role, teams_for_user


class ProgressOutput(serializers.Serializer):
    """Where a training job stands (docs/jobs.md, "Progress and time to finish")."""

    percent = serializers.FloatField()
    step = serializers.IntegerField()
    total = serializers.IntegerField()
    # The field's name is the API's; DRF takes declared fields off the class, so it does not
    # shadow ``Field.source`` (mypy cannot know).
    source = serializers.ChoiceField(choices=["log", "trainer"])  # type: ignore[assignment]


class JobOutput(serializers.ModelSerializer):
    """A job as the API returns it: identity, state and the spec fields."""

    team = serializers.CharField(source="team.slug")
    owner = serializers.CharField(source="owner.username")
    spec = serializers.JSONField()
    cluster = serializers.SerializerMethodField(
        help_text="The cluster it runs on: the one its spec named, or the one chosen for any."
    )
    restart_attempt = serializers.IntegerField(source="gpu_failure_retries")
    progress = ProgressOutput(allow_null=True)
    eta_seconds = serializers.FloatField(allow_null=True)

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
            "advice",
            "placement",
            "exit_code",
            "borrowing",
            "evictions",
            "queueing",
            "cluster",
            "idle_warned_at",
            "idle_action_due",
            "idle_exempt_reason",
            "scaled_to_zero_from",
            "restart_attempt",
            "excluded_nodes",
            "gpu_hours_lost",
            "progress",
            "eta_seconds",
            "eta_basis",
            "created_at",
            "admitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Job) -> dict[str, Any]:
        data = self.job_fields(instance)
        # The spec fields also sit at the top level, as clients sent them.
        for key, value in instance.spec.items():
            data.setdefault(key, value)
        return data

    @extend_schema_field(OpenApiTypes.STR)
    def get_cluster(self, job: Job) -> str:
        return job_cluster_name(job)

    def job_fields(self, job: Job) -> dict[str, Any]:
        """``Meta.fields`` as the generic ModelSerializer renders them, written out once
        (``jobs.selectors.jobs.job_output``: a notice carries some of the same).

        Building a ModelSerializer's fields (deep copies, model introspection) costs more
        than rendering them, on every job of every response; ``Meta.fields`` still describe
        the output in the OpenAPI schema. tests/api/test_job_output.py checks the two agree.
        """
        return job_output(job)


class FitOutput(serializers.Serializer):
    verdict = serializers.ChoiceField(
        choices=["fits", "preempts", "waits-for-quota", "waits", "never", "unknown"]
    )
    message = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField())
    preempted_jobs = serializers.ListField(child=serializers.IntegerField())
    scheduler_message = serializers.CharField(allow_blank=True)
    quota = serializers.ChoiceField(
        choices=["nominal", "borrowing", "preempts", "waits", ""],
        help_text="What admission would do in the team's cohort: run on nominal quota, run on "
        "borrowed quota (evictable by a lender), evict jobs first, or wait.",
    )


class QueuePositionOutput(serializers.Serializer):
    team = serializers.IntegerField(help_text="1-based position in the team's queue.")
    cluster = serializers.IntegerField(help_text="1-based position among all queued jobs.")
    blocking_resource = serializers.CharField(allow_null=True)
    estimated_start = serializers.DateTimeField(
        allow_null=True, help_text="Null when unknown (running jobs have no deadline)."
    )
    estimate = serializers.CharField(help_text="The estimate in words.")


class JobDetailOutput(JobOutput):
    """One job, with its place in the queue while it is queued (null otherwise)."""

    queue_position = serializers.SerializerMethodField()

    class Meta(JobOutput.Meta):
        fields = [*JobOutput.Meta.fields, "queue_position"]
        read_only_fields = fields

    @extend_schema_field(QueuePositionOutput(allow_null=True))
    def get_queue_position(self, job: Job) -> dict[str, Any] | None:
        position = job_queue_position(job=job)
        return None if position is None else QueuePositionOutput(position).data

    def job_fields(self, job: Job) -> dict[str, Any]:
        return {**super().job_fields(job), "queue_position": self.get_queue_position(job)}


class JobEventOutput(serializers.ModelSerializer):
    """One line of the timeline: a portal state change or a Kubernetes event."""

    class Meta:
        model = JobEvent
        fields = ["created_at", "source", "type", "reason", "message"]
        read_only_fields = fields


class PodLogOutput(serializers.Serializer):
    pod = serializers.CharField()
    node = serializers.CharField()
    log = serializers.CharField()
    note = serializers.CharField(help_text="Why this pod has no log yet, if it has none.")


class JobLogsOutput(serializers.Serializer):
    pods = PodLogOutput(many=True)
    error = serializers.CharField(allow_null=True)
    detail = serializers.CharField(allow_null=True)


MAX_PAGE_SIZE = 200


class JobListQuery(serializers.Serializer):
    """The job list's filters and page: a state or kind that does not exist, or a page size
    that is not a number, is a 400 naming the parameter, not an empty page or an ignored
    value; a team or owner no job has (a NUL character included) is an empty page."""

    team = QueryText(required=False, allow_blank=True, max_length=50, help_text="Team slug")
    state = serializers.ChoiceField(choices=JobState.choices, required=False)
    kind = serializers.ChoiceField(choices=Job.Kind.choices, required=False)
    owner = QueryText(
        required=False, allow_blank=True, max_length=150, help_text="The owner's username"
    )
    page = serializers.IntegerField(required=False, min_value=1)
    page_size = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text=f"Jobs per page (default {JOB_LIST_PAGE_SIZE}; more than {MAX_PAGE_SIZE} "
        f"gives {MAX_PAGE_SIZE})",
    )


class LogTailQuery(serializers.Serializer):
    tail = serializers.IntegerField(min_value=1, max_value=MAX_LOG_TAIL, default=200)


class ManifestQuery(serializers.Serializer):
    format = serializers.ChoiceField(
        choices=["yaml", "json"], default="yaml", help_text="yaml (default) or json"
    )


class PreviewOutput(serializers.Serializer):
    valid = serializers.BooleanField()
    manifests = serializers.ListField(child=serializers.DictField())
    yaml = serializers.CharField()
    resource_defaults = serializers.DictField()
    fit = FitOutput()


class JobPagination(PageNumberPagination):
    """The job list's pages: as many rows as the HTML list by default, ``?page_size=`` to 200."""

    page_size = JOB_LIST_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE


class PaginatedJobOutput(serializers.Serializer):
    """One page of jobs (``?page=``), as DRF's ``PageNumberPagination`` returns it."""

    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = JobOutput(many=True)


TEMPLATE_PARAMETER = OpenApiParameter(
    "template",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    required=False,
    description="Start from this template (NAME, TEAM/NAME or its id): the body's fields are "
    "merged over the template's (gpu and env key by key), then checked as any submission.",
)


def spec_from_request(request: Request) -> Any:
    """The spec a submission or preview asks for: the body, over ``?template=`` if given."""
    template = request.query_params.get("template")
    if not template:
        return request.data
    # An id is a number an id column can hold; any other text is a name.
    # ("³".isdigit() is true, so ASCII digits only.)
    is_id = template.isascii() and template.isdigit() and len(template) <= 9
    ref: str | int = int(template) if is_id else template
    return template_selectors.spec_from_template(user=request.user, template=ref, data=request.data)


class JobListCreateApi(ApiView):
    query_input = JobListQuery

    @extend_schema(
        operation_id="jobs_list",
        responses={200: PaginatedJobOutput, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        ids = jobs_for_user(
            user=request.user,
            team=self.query.get("team") or None,
            state=self.query.get("state"),
            kind=self.query.get("kind"),
            owner=self.query.get("owner") or None,
        ).values_list("pk", flat=True)
        # Paged over ids, then the page's rows by id (see job_list_page): a deep page does
        # not read every job before it. The manifests and quota demand are not returned.
        paginator = JobPagination()
        page_ids = paginator.paginate_queryset(ids, request, view=self) or []
        jobs = jobs_in_order(ids=page_ids, defer=("manifests", "demand"))
        return paginator.get_paginated_response(JobOutput(jobs, many=True).data)

    @extend_schema(
        operation_id="jobs_create",
        request={"application/json": JobSpecInput},
        parameters=[TEMPLATE_PARAMETER],
        responses={201: JobOutput, **error_responses(400, 401, 404, 413, 415, 429)},
    )
    def post(self, request: Request) -> Response:
        job = job_submit(user=request.user, data=spec_from_request(request))  # type: ignore[arg-type]
        return Response(JobOutput(job).data, status=status.HTTP_201_CREATED)


class JobDetailApi(APIView):
    @extend_schema(
        operation_id="jobs_retrieve", responses={200: JobDetailOutput, **error_responses(401, 404)}
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        return Response(JobDetailOutput(job).data)


class JobEventsApi(APIView):
    @extend_schema(
        operation_id="jobs_events",
        responses={200: JobEventOutput(many=True), **error_responses(401, 404)},
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        return Response(JobEventOutput(job_events(job=job), many=True).data)


class JobLogsApi(ApiView):
    query_input = LogTailQuery

    @extend_schema(
        operation_id="jobs_logs",
        responses={200: JobLogsOutput, **error_responses(400, 401, 404, 503)},
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        logs = job_log_tail(job=job, tail=self.query["tail"])
        if logs.error:
            return Response({"detail": logs.error}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        return Response(JobLogsOutput(logs).data)


class JobPreviewApi(APIView):
    @extend_schema(
        operation_id="jobs_preview",
        request={"application/json": JobSpecInput},
        parameters=[TEMPLATE_PARAMETER],
        responses={200: PreviewOutput, **error_responses(400, 401, 404, 413, 415, 429)},
    )
    def post(self, request: Request) -> Response:
        preview = job_preview(user=request.user, data=spec_from_request(request))
        return Response(
            {
                "valid": True,
                "manifests": preview.manifests,
                "yaml": preview.yaml,
                "resource_defaults": preview.defaults,
                "fit": FitOutput(preview.fit).data,
            }
        )


MANIFESTS_SCHEMA = {"type": "array", "items": {"type": "object"}}


class JobManifestApi(ApiView):
    query_input = ManifestQuery

    @extend_schema(
        operation_id="jobs_manifest",
        responses={
            # YAML: a stream, one document per object, as kubectl apply -f reads it (the
            # schema describes its documents in order); JSON: the same objects in a list.
            (200, "text/yaml"): OpenApiResponse(
                MANIFESTS_SCHEMA,
                description="The manifests as a YAML stream, one document per object.",
            ),
            (200, "application/json"): OpenApiResponse(
                MANIFESTS_SCHEMA, description="The manifests as a JSON list."
            ),
            **error_responses(400, 401, 404),
        },
    )
    def get(self, request: Request, job_id: int) -> HttpResponse | Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        if self.query["format"] == "json":
            return Response(job.manifests)
        return HttpResponse(to_yaml(job.manifests), content_type="text/yaml; charset=utf-8")


class JobCancelApi(APIView):
    @extend_schema(
        operation_id="jobs_cancel",
        request=None,
        responses={200: JobOutput, **error_responses(401, 403, 404, 409, 429)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        job = job_cancel(user=request.user, job_id=job.pk)  # type: ignore[arg-type]
        return Response(JobOutput(job).data)


class IdleExemptInput(serializers.Serializer):
    reason = serializers.CharField(
        max_length=200,
        allow_blank=True,
        help_text="Why the job may hold idle GPUs; empty ends the exemption.",
    )


class JobIdleExemptApi(APIView):
    @extend_schema(
        operation_id="jobs_idle_exempt",
        request=IdleExemptInput,
        responses={200: JobOutput, **error_responses(400, 401, 403, 404, 415, 429)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        """Exempt a job from its team's idle-GPU policy (leads), or end the exemption."""
        job = job_get_for_user(user=request.user, job_id=job_id)
        idle_exempt_check(user=request.user, job=job)  # type: ignore[arg-type]
        data = IdleExemptInput(data=request.data)
        data.is_valid(raise_exception=True)
        job = job_idle_exempt(
            user=request.user,  # type: ignore[arg-type]
            job_id=job.pk,
            reason=data.validated_data["reason"],
        )
        return Response(JobOutput(job).data)


class JobResumeApi(APIView):
    @extend_schema(
        operation_id="jobs_resume",
        request=None,
        responses={200: JobOutput, **error_responses(401, 403, 404, 409, 429, 503)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        """Scale an inference deployment the idle-GPU policy scaled to zero back up."""
        job = job_get_for_user(user=request.user, job_id=job_id)
        job = job_resume(user=request.user, job_id=job.pk)  # type: ignore[arg-type]
        return Response(JobOutput(job).data)


class QuotaOutput(serializers.Serializer):
    cluster = serializers.CharField(
        help_text="The cluster it is a share of: a team's quota is per cluster."
    )
    resource = serializers.CharField()
    limit = serializers.IntegerField(help_text="The nominal (guaranteed) quota; = nominal.")
    nominal = serializers.IntegerField()
    used = serializers.IntegerField()
    borrowed = serializers.IntegerField(help_text="Used above nominal, borrowed from the cohort.")
    lent = serializers.IntegerField(help_text="Of nominal, what other teams of the cohort use.")
    borrowing_limit = serializers.IntegerField(
        allow_null=True, help_text="Most the team may borrow above nominal; null: no limit."
    )
    lending_limit = serializers.IntegerField(
        allow_null=True, help_text="Most of nominal the team lends; null: all of it."
    )
    percent = serializers.IntegerField()


class TeamOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    role = serializers.CharField(allow_null=True)
    cohort = serializers.CharField(allow_null=True, help_text="The cohort's slug, or null.")
    queued_jobs = serializers.IntegerField()
    quotas = QuotaOutput(many=True)


class TeamListApi(APIView):
    @extend_schema(
        operation_id="teams_list", responses={200: TeamOutput(many=True), **error_responses(401)}
    )
    def get(self, request: Request) -> Response:
        teams = list(teams_for_user(user=request.user).select_related("cohort"))
        quotas = quota_usage_every_cluster(teams=teams)
        rows = [
            {
                "slug": team.slug,
                "name": team.name,
                "namespace": team.namespace,
                "role": membership_role(user=request.user, team=team),
                "cohort": team.cohort.slug if team.cohort else None,
                "queued_jobs": queued_count(team=team),
                "quotas": quotas[team.pk],
            }
            for team in teams
        ]
        return Response(TeamOutput(rows, many=True).data)


class CohortTeamOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    weight = serializers.FloatField(help_text="Fair-sharing weight among borrowers.")
    inference_may_borrow = serializers.BooleanField()
    quotas = QuotaOutput(many=True)
    borrowing_jobs = serializers.ListField(
        child=serializers.IntegerField(), help_text="Ids of its jobs running on borrowed quota."
    )


class CohortTotalOutput(serializers.Serializer):
    resource = serializers.CharField()
    nominal = serializers.IntegerField()
    used = serializers.IntegerField()
    borrowed = serializers.IntegerField()
    unused = serializers.IntegerField(help_text="Nominal quota no team of the cohort uses now.")


class CohortOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    teams = CohortTeamOutput(many=True)
    totals = CohortTotalOutput(many=True)


def _cohort_data(view: cohort_selectors.CohortView) -> dict[str, Any]:
    return {
        "slug": view.cohort.slug,
        "name": view.cohort.name,
        "description": view.cohort.description,
        "teams": [
            {
                "slug": member.team.slug,
                "name": member.team.name,
                "weight": float(member.team.weight),
                "inference_may_borrow": member.team.inference_may_borrow,
                "quotas": member.quotas,
                "borrowing_jobs": member.borrowing_jobs,
            }
            for member in view.teams
        ],
        "totals": view.totals,
    }


class CohortListApi(APIView):
    @extend_schema(
        operation_id="cohorts_list",
        responses={200: CohortOutput(many=True), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        views = cohort_selectors.cohorts_for_user(user=request.user)
        return Response(CohortOutput([_cohort_data(v) for v in views], many=True).data)


class CohortDetailApi(APIView):
    @extend_schema(
        operation_id="cohorts_retrieve",
        responses={200: CohortOutput, **error_responses(401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        view = cohort_selectors.cohort_get_for_user(user=request.user, slug=slug)
        return Response(CohortOutput(_cohort_data(view)).data)


class TemplateOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    team = serializers.CharField(
        allow_null=True, source="team.slug", help_text="The owning team; null: personal."
    )
    owner = serializers.CharField(
        allow_null=True, source="owner.username", help_text="The owner; null: a team's."
    )
    spec = serializers.DictField(help_text="Any subset of the job spec's fields.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class TemplateInput(serializers.Serializer):
    name = serializers.CharField(max_length=63)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    team = serializers.CharField(
        max_length=40,
        required=False,
        allow_null=True,
        help_text="Save it as this team's template (leads only); leave out for your own.",
    )
    spec = serializers.JSONField(help_text="Any subset of the job spec's fields.")


class TemplateUpdateInput(serializers.Serializer):
    name = serializers.CharField(max_length=63, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    spec = serializers.JSONField(required=False)


class TemplateListQuery(serializers.Serializer):
    name = QueryText(
        required=False, max_length=120, help_text="NAME or TEAM/NAME: the template it names."
    )


def _template_data(template: JobTemplate) -> dict[str, Any]:
    return TemplateOutput(template).data


class TemplateListCreateApi(ApiView):
    query_input = TemplateListQuery

    @extend_schema(
        operation_id="templates_list",
        responses={200: TemplateOutput(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        name = self.query.get("name")
        if name:
            found = [template_selectors.template_find(user=request.user, name=name)]
        else:
            found = list(template_selectors.templates_for_user(user=request.user))
        return Response([_template_data(t) for t in found])

    @extend_schema(
        operation_id="templates_create",
        request=TemplateInput,
        responses={201: TemplateOutput, **error_responses(400, 401, 403, 409, 415, 429)},
    )
    def post(self, request: Request) -> Response:
        data = TemplateInput(data=request.data)
        data.is_valid(raise_exception=True)
        template = template_services.template_create(
            user=request.user,  # type: ignore[arg-type]
            name=data.validated_data["name"],
            spec=data.validated_data["spec"],
            team=data.validated_data.get("team"),
            description=data.validated_data.get("description", ""),
        )
        return Response(_template_data(template), status=status.HTTP_201_CREATED)


class TemplateDetailApi(APIView):
    @extend_schema(
        operation_id="templates_retrieve",
        responses={200: TemplateOutput, **error_responses(401, 404)},
    )
    def get(self, request: Request, template_id: int) -> Response:
        template = template_selectors.template_get_for_user(
            user=request.user, template_id=template_id
        )
        return Response(_template_data(template))

    @extend_schema(
        operation_id="templates_partial_update",
        request=TemplateUpdateInput,
        responses={200: TemplateOutput, **error_responses(400, 401, 403, 404, 409, 415, 429)},
    )
    def patch(self, request: Request, template_id: int) -> Response:
        data = TemplateUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        template = template_services.template_update(
            user=request.user,  # type: ignore[arg-type]
            template_id=template_id,
            name=data.validated_data.get("name"),
            spec=data.validated_data.get("spec"),
            description=data.validated_data.get("description"),
        )
        return Response(_template_data(template))

    @extend_schema(
        operation_id="templates_destroy",
        responses={204: None, **error_responses(401, 403, 404, 429)},
    )
    def delete(self, request: Request, template_id: int) -> Response:
        template_services.template_delete(user=request.user, template_id=template_id)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)
