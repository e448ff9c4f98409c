"""REST API for GPU metrics: thin views over ``monitoring.selectors``.

Scoped like the rest of the API (another team's job or team is 404). Prometheus
unreachable → 503 ``{"detail": "metrics unavailable: …"}`` (``MetricsUnavailable`` is an
``ApplicationError``, turned into a response by the one exception handler).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_errors import error_responses
from core.apis import ApiView, QueryText
from jobs.selectors.jobs import job_get_for_user
from monitoring.prometheus import Series
from monitoring.queries import JOB_METRICS, RANGES
from monitoring.selectors.cluster import cluster_overview_get
from monitoring.selectors.common import device_name
from monitoring.selectors.idle import idle_report_get
from monitoring.selectors.job import job_gpus_get
from monitoring.selectors.reports import GROUPS, Report, gpu_hours_report
from monitoring.selectors.team import TeamUsage, team_usage_get
from teams.selectors import team_get_for_user


def _range_field(default: str | None) -> serializers.ChoiceField:
    words = f"must be one of {', '.join(RANGES)}"
    errors: dict[str, Any] = {
        "invalid_choice": f"{words} (got '{{input}}').",
        "blank": f"{words} (got '').",
    }
    if default is None:
        return serializers.ChoiceField(
            choices=list(RANGES),
            required=False,
            help_text="Only the last part of the job's lifetime (default: all of it).",
            error_messages=errors,
        )
    return serializers.ChoiceField(
        choices=list(RANGES),
        default=default,
        help_text=f"How far back: {', '.join(RANGES)} (anything else is a 400).",
        error_messages=errors,
    )


class ClusterRangeQuery(serializers.Serializer):
    range = _range_field("1h")


class TeamRangeQuery(serializers.Serializer):
    range = _range_field("24h")


class JobRangeQuery(serializers.Serializer):
    range = _range_field(None)


UNAVAILABLE = OpenApiResponse(
    inline_serializer("MetricsUnavailable", {"detail": serializers.CharField()}),
    description='Prometheus could not answer: {"detail": "metrics unavailable: <why>"}.',
)


class SeriesOutput(serializers.Serializer):
    name = serializers.SerializerMethodField()
    labels = serializers.DictField(child=serializers.CharField())
    timestamps = serializers.ListField(child=serializers.FloatField(), help_text="Unix seconds.")
    values = serializers.ListField(child=serializers.FloatField(allow_null=True))

    def get_name(self, series: Series) -> str:
        return device_name(series.labels) if series.labels else "all"


class WindowOutput(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    step = serializers.IntegerField(help_text="Seconds between points.")


class IdleJobOutput(serializers.Serializer):
    job_id = serializers.IntegerField(source="job.pk")
    name = serializers.CharField(source="job.name")
    team = serializers.CharField(source="job.team.slug")
    owner = serializers.CharField(source="job.owner.username")
    started_at = serializers.DateTimeField(source="job.started_at")
    gpus_held = serializers.IntegerField()
    peak_utilisation = serializers.FloatField(allow_null=True, help_text="Percent, in the window.")
    wasted_gpu_hours = serializers.FloatField(help_text="GPU-hours held under the threshold.")
    threshold_percent = serializers.FloatField(
        source="rule.threshold_percent", help_text="Its team's idle threshold, percent."
    )
    window_minutes = serializers.FloatField(
        source="rule.window_minutes", help_text="Its team's idle window, minutes."
    )
    idle_action_due = serializers.DateTimeField(
        source="job.idle_action_due",
        allow_null=True,
        help_text="When the team's idle-GPU policy stops it unless its GPUs become busy.",
    )
    idle_exempt_reason = serializers.CharField(
        source="job.idle_exempt_reason", help_text="Why a lead exempted it (empty: not)."
    )


class IdleOutput(serializers.Serializer):
    threshold_percent = serializers.FloatField(help_text="The portal's (a team may set its own).")
    window_minutes = serializers.FloatField(help_text="The portal's (a team may set its own).")
    idle_gpus_total = serializers.IntegerField(help_text="Idle GPUs of every team (a count).")
    jobs = IdleJobOutput(many=True, help_text="Idle jobs of your teams.")


class ProductOutput(serializers.Serializer):
    product = serializers.CharField()
    nodes = serializers.IntegerField()
    physical_gpus = serializers.IntegerField(
        help_text="GPUs in the machines (GFD's nvidia.com/gpu.count), however offered."
    )
    gpus_total = serializers.IntegerField(help_text="Offered as whole GPUs (nvidia.com/gpu).")
    gpus_allocated = serializers.IntegerField()
    gpus_free = serializers.IntegerField()
    mig_total = serializers.IntegerField()
    mig_allocated = serializers.IntegerField()
    shared_total = serializers.IntegerField()
    shared_allocated = serializers.IntegerField()


class GpuNowOutput(serializers.Serializer):
    node = serializers.CharField()
    gpu = serializers.CharField()
    utilisation = serializers.FloatField(allow_null=True)
    temperature = serializers.FloatField(allow_null=True)


class AlertOutput(serializers.Serializer):
    name = serializers.CharField()
    severity = serializers.CharField()
    gpu = serializers.CharField()
    node = serializers.CharField()
    namespace = serializers.CharField()
    pod = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    summary = serializers.CharField()
    description = serializers.CharField()
    active_at = serializers.CharField()
    job_id = serializers.IntegerField(source="job.pk", allow_null=True, default=None)


class GpuHealthOutput(serializers.Serializer):
    node = serializers.CharField()
    gpu = serializers.CharField(help_text="Empty for a node-wide row.")
    xid = serializers.IntegerField(allow_null=True, help_text="The GPU's last XID (DCGM).")
    xid_meaning = serializers.CharField()
    ecc_dbe = serializers.IntegerField(allow_null=True, help_text="Double-bit ECC errors.")
    unhealthy_gpus = serializers.IntegerField(
        help_text="GPU resources the device plugin took out of service (capacity − allocatable)."
    )
    ready = serializers.CharField(help_text="The node's Ready condition.")
    failures_week = serializers.IntegerField(
        help_text="Node rows: GPU failures that failed jobs in the last 7 days."
    )
    cordoned = serializers.BooleanField(help_text="Node rows: the node is unschedulable.")


class ClusterOutput(serializers.Serializer):
    range = serializers.CharField(source="range_key")
    window = WindowOutput()
    products = ProductOutput(many=True)
    gpus = GpuNowOutput(many=True)
    utilisation = SeriesOutput(many=True, help_text="Cluster mean utilisation, %.")
    alerts = AlertOutput(many=True)
    idle = IdleOutput()
    gpu_health = GpuHealthOutput(many=True)


class ClusterMonitoringApi(ApiView):
    query_input = ClusterRangeQuery

    @extend_schema(
        operation_id="monitoring_cluster",
        responses={
            200: ClusterOutput,
            **error_responses(400, 401),
            503: UNAVAILABLE,
        },
    )
    def get(self, request: Request) -> Response:
        overview = cluster_overview_get(
            user=request.user, range_key=self.query["range"], tolerate_errors=False
        )
        temps = {(c.node, c.gpu): c.value for c in overview.temperature_cells}
        data: dict[str, Any] = {
            "range_key": overview.range_key,
            "window": overview.window,
            "products": overview.products,
            "gpus": [
                {
                    "node": c.node,
                    "gpu": c.gpu,
                    "utilisation": c.value,
                    "temperature": temps.get((c.node, c.gpu)),
                }
                for c in overview.utilisation_cells
            ],
            "utilisation": overview.utilisation,
            "alerts": overview.alerts,
            "idle": overview.idle,
            "gpu_health": overview.gpu_health,
        }
        return Response(ClusterOutput(data).data)


class QuotaNowOutput(serializers.Serializer):
    resource = serializers.CharField()
    limit = serializers.IntegerField()
    used = serializers.IntegerField()


class JobGpuHoursOutput(serializers.Serializer):
    job_id = serializers.IntegerField(source="job.pk")
    name = serializers.CharField(source="job.name")
    owner = serializers.CharField(source="job.owner.username")
    state = serializers.CharField(source="job.state")
    gpu_count = serializers.IntegerField(source="job.gpu_count")
    gpu_hours = serializers.FloatField(help_text="GPU-hours held inside the range.")


class AllocationOutput(serializers.Serializer):
    timestamps = serializers.ListField(child=serializers.FloatField(), help_text="Unix seconds.")
    values = serializers.ListField(
        child=serializers.FloatField(), help_text="GPUs held by running jobs."
    )


class TeamUsageOutput(serializers.Serializer):
    team = serializers.CharField(source="team.slug")
    range = serializers.CharField(source="range_key")
    window = WindowOutput()
    quotas = QuotaNowOutput(many=True)
    allocated_gpus = serializers.SerializerMethodField()
    allocated_by_resource = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField()),
        help_text="What the team's jobs held of each GPU quota resource, at the "
        "timestamps of allocated_gpus: compare each with its own quota.",
    )
    utilisation = SeriesOutput(many=True, help_text="Mean utilisation of the team's GPUs, %.")
    busy_gpus = SeriesOutput(many=True, help_text="Σ utilisation / 100 of the team's GPUs.")
    jobs_by_gpu_hours = JobGpuHoursOutput(many=True)
    gpu_hours_week = serializers.FloatField()
    gpu_hours_month = serializers.FloatField()
    idle = IdleOutput()

    @extend_schema_field(AllocationOutput)
    def get_allocated_gpus(self, usage: TeamUsage) -> dict[str, list[float]]:
        return {"timestamps": usage.timestamps, "values": usage.allocated_gpus}


class TeamUsageApi(ApiView):
    query_input = TeamRangeQuery

    @extend_schema(
        operation_id="monitoring_team_usage",
        responses={
            200: TeamUsageOutput,
            **error_responses(400, 401),
            404: OpenApiResponse(description="Not your team."),
            503: UNAVAILABLE,
        },
    )
    def get(self, request: Request, slug: str) -> Response:
        team = team_get_for_user(user=request.user, slug=slug)
        usage = team_usage_get(
            team=team, user=request.user, range_key=self.query["range"], tolerate_errors=False
        )
        return Response(TeamUsageOutput(usage).data)


class JobGpusOutput(serializers.Serializer):
    job_id = serializers.IntegerField(source="job.pk")
    window = WindowOutput(allow_null=True)
    detail = serializers.CharField(allow_null=True, help_text="Why there is no data.")
    notes = serializers.ListField(child=serializers.CharField())
    utilisation = SeriesOutput(many=True, help_text="%, per (pod, GPU).")
    memory_used = SeriesOutput(many=True, help_text="MiB.")
    temperature = SeriesOutput(many=True, help_text="°C.")
    power = SeriesOutput(many=True, help_text="W.")


class JobGpusApi(ApiView):
    query_input = JobRangeQuery

    @extend_schema(
        operation_id="monitoring_job_gpus",
        responses={
            200: JobGpusOutput,
            **error_responses(400, 401),
            404: OpenApiResponse(description="Not your job."),
            503: UNAVAILABLE,
        },
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = job_get_for_user(user=request.user, job_id=job_id)
        range_key = self.query.get("range")
        result = job_gpus_get(
            job=job,
            range_seconds=RANGES[range_key] if range_key else None,
            tolerate_errors=False,
        )
        data = {
            "job": job,
            "window": result.window,
            "detail": result.detail,
            "notes": result.notes,
            **{key: result.metrics.get(key, []) for key in JOB_METRICS},
        }
        return Response(JobGpusOutput(data).data)


class IdleApi(APIView):
    @extend_schema(
        operation_id="monitoring_idle",
        responses={200: IdleOutput, **error_responses(400, 401), 503: UNAVAILABLE},
    )
    def get(self, request: Request) -> Response:
        return Response(IdleOutput(idle_report_get(user=request.user)).data)


# --- GPU-hour reports ------------------------------------------------------------------


class ReportQuery(serializers.Serializer):
    start = serializers.DateField(help_text="The first day, YYYY-MM-DD.")
    end = serializers.DateField(help_text="The last day, YYYY-MM-DD (included; at most 400 days).")
    team = QueryText(required=False, help_text="Only this team (its slug).")
    group_by = serializers.ChoiceField(
        choices=list(GROUPS),
        default="team",
        help_text="One row per team (default), per team and user, per team and product, "
        "per job, or per day and team.",
    )
    format = serializers.ChoiceField(
        choices=["json", "csv"], default="json", help_text="json (default) or csv"
    )


class ReportRowOutput(serializers.Serializer):
    team = serializers.CharField(allow_null=True)
    user = serializers.CharField(allow_null=True)
    product = serializers.CharField(
        allow_null=True,
        help_text="GPU product, mig-<profile> (slice-hours) or shared:<product> (time-sliced: "
        "used is the whole GPU's utilisation, DCGM cannot split it between pods).",
    )
    job_id = serializers.IntegerField(allow_null=True)
    job_name = serializers.CharField(allow_null=True)
    day = serializers.DateField(allow_null=True)
    gpu_hours_allocated = serializers.FloatField(help_text="GPUs held × hours.")
    gpu_hours_used = serializers.FloatField(
        allow_null=True, help_text="Utilisation integrated over the hours held (null: no metrics)."
    )
    efficiency = serializers.FloatField(
        allow_null=True, help_text="used ÷ allocated (of the hours with metrics), 0–1."
    )
    idle_gpu_hours = serializers.FloatField(
        allow_null=True, help_text="Hours held under the team's idle threshold."
    )
    cost = serializers.DecimalField(
        max_digits=16,
        decimal_places=2,
        allow_null=True,
        coerce_to_string=False,
        help_text="allocated × the product's price (null: no price set).",
    )
    gpu_hours_unmeasured = serializers.FloatField(help_text="Allocated hours without metrics.")


class ReportOutput(serializers.Serializer):
    start = serializers.DateField()
    end = serializers.DateField()
    group_by = serializers.CharField()
    team = serializers.CharField(source="team.slug", allow_null=True, default=None)
    scope = serializers.ChoiceField(
        choices=["all", "teams", "own"],
        help_text="all: every team (platform admin); teams: the teams you lead and your own "
        "jobs; own: your own jobs.",
    )
    currency = serializers.CharField()
    rows = ReportRowOutput(many=True)
    totals = ReportRowOutput()
    days_missing = serializers.ListField(
        child=serializers.DateField(), help_text="Days of the period not rolled up yet."
    )
    days_unmeasured = serializers.ListField(
        child=serializers.DateField(),
        help_text="Days rolled up while Prometheus could not answer (used and idle unknown).",
    )


CSV_NUMBERS = ("gpu_hours_allocated", "gpu_hours_used", "efficiency", "idle_gpu_hours", "cost")


def report_csv_columns(group_by: str) -> list[str]:
    """The CSV's columns: the contract's (team, user, product, the figures), with the job
    or the day in front when rows are per job or per day."""
    keys = {"job": ["job_id", "job_name"], "day": ["day"]}.get(group_by, [])
    return [*keys, "team", "user", "product", *CSV_NUMBERS]


def report_csv(report: Report) -> str:
    columns = report_csv_columns(report.group_by)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in report.rows:
        writer.writerow(["" if (v := getattr(row, c)) is None else v for c in columns])
    return out.getvalue()


def report_csv_name(report: Report) -> str:
    team = f"-{report.team.slug}" if report.team else ""
    return f"gpu-hours{team}-{report.start}-{report.end}-by-{report.group_by}.csv"


class GpuHoursReportApi(ApiView):
    query_input = ReportQuery

    @extend_schema(
        operation_id="reports_gpu_hours",
        responses={
            (200, "application/json"): ReportOutput,
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="The same rows as CSV (format=csv): team, user, product, "
                "gpu_hours_allocated, gpu_hours_used, efficiency, idle_gpu_hours, cost.",
            ),
            **error_responses(400, 401),
            404: OpenApiResponse(description="No such team, or not yours."),
        },
    )
    def get(self, request: Request) -> HttpResponse | Response:
        report = gpu_hours_report(
            user=request.user,
            start=self.query["start"],
            end=self.query["end"],
            team_slug=self.query.get("team"),
            group_by=self.query["group_by"],
        )
        if self.query["format"] == "csv":
            response = HttpResponse(report_csv(report), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{report_csv_name(report)}"'
            return response
        return Response(ReportOutput(report).data)
