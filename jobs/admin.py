"""Jobs in the admin console: read-only, for platform admins looking across teams.

The quota pages of the teams app also show what each team's jobs hold ("In use"): the
jobs app adds that column to the teams app's admin classes and registers its versions
in their place (Django's documented way to extend another app's admin, as for
``UserAdmin``), so teams never imports jobs.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from jobs.models import Job, JobEvent
from jobs.selectors.cohorts import cohort_views
from jobs.selectors.jobs import QuotaUse, quota_usage
from teams.admin import CohortAdmin, GpuQuotaAdmin, GpuQuotaInline, MembershipInline, TeamAdmin
from teams.models import Cohort, GpuQuota, Team


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ("created_at", "source", "type", "reason", "message")
    readonly_fields = ("created_at", "source", "type", "reason", "message")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "team",
        "owner",
        "kind",
        "gpu_count",
        "priority",
        "state",
        "reason",
        "borrowing",
        "evictions",
        "created_at",
    ]
    list_filter = ["state", "kind", "priority", "borrowing", "team"]
    search_fields = ["name", "owner__username", "team__slug", "object_name"]
    list_select_related = ["team", "owner"]
    date_hierarchy = "created_at"
    inlines = [JobEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _use(quota: GpuQuota) -> QuotaUse | None:
    """What the row's team holds of its quota, read once per row: the In use, Borrowed and
    Lent columns all show it (three reads of the team's usage per row before)."""
    if quota.pk is None:
        return None
    if not hasattr(quota, "_use"):
        found = (
            q
            for q in quota_usage(team=quota.team, cluster=quota.cluster)
            if q.resource == quota.resource
        )
        quota._use = next(found, None)  # type: ignore[attr-defined]
    use: QuotaUse | None = quota._use  # type: ignore[attr-defined]
    return use


class _QuotaUseColumns:
    @admin.display(description="In use")
    def in_use(self, quota: GpuQuota) -> str:
        use = _use(quota)
        return "—" if use is None else use.used_display

    @admin.display(description="Borrowed")
    def borrowed(self, quota: GpuQuota) -> str:
        use = _use(quota)
        return "—" if use is None else str(use.borrowed)

    @admin.display(description="Lent")
    def lent(self, quota: GpuQuota) -> str:
        use = _use(quota)
        return "—" if use is None else str(use.lent)


class GpuQuotaInUseInline(_QuotaUseColumns, GpuQuotaInline):
    fields = [*GpuQuotaInline.fields, "in_use", "borrowed", "lent"]
    readonly_fields = ["in_use", "borrowed", "lent"]


class TeamInUseAdmin(TeamAdmin):
    inlines = [MembershipInline, GpuQuotaInUseInline]


class GpuQuotaInUseAdmin(_QuotaUseColumns, GpuQuotaAdmin):
    # The quota's own columns, then what is in use, borrowed and lent, then when it changed.
    list_display = [*GpuQuotaAdmin.list_display[:-1], "in_use", "borrowed", "lent", "updated_at"]


class CohortInUseAdmin(CohortAdmin):
    list_display = [*CohortAdmin.list_display[:-1], "quota_totals", "created_at"]

    @admin.display(description="Nominal / in use / borrowed / unused")
    def quota_totals(self, cohort: Cohort) -> str:
        views = cohort_views(slug=cohort.slug)
        if not views:
            return "—"
        return (
            "; ".join(
                f"{t['resource']}: {t['nominal']} / {t['used']} / {t['borrowed']} / {t['unused']}"
                for t in views[0].totals
            )
            or "—"
        )


admin.site.unregister(Cohort)
admin.site.register(Cohort, CohortInUseAdmin)
admin.site.unregister(Team)
admin.site.register(Team, TeamInUseAdmin)
admin.site.unregister(GpuQuota)
admin.site.register(GpuQuota, GpuQuotaInUseAdmin)
