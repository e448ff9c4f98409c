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
from jobs.quota import format_amount
from jobs.selectors import team_usage
from teams.admin import GpuQuotaAdmin, GpuQuotaInline, MembershipInline, TeamAdmin
from teams.models import GpuQuota, Team


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
        "created_at",
    ]
    list_filter = ["state", "kind", "priority", "team"]
    search_fields = ["name", "owner__username", "team__slug", "object_name"]
    list_select_related = ["team", "owner"]
    date_hierarchy = "created_at"
    inlines = [JobEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _in_use(quota: GpuQuota) -> str:
    if quota.pk is None:
        return "—"
    return format_amount(quota.resource, team_usage(team=quota.team).get(quota.resource, 0))


class GpuQuotaInUseInline(GpuQuotaInline):
    fields = [*GpuQuotaInline.fields, "in_use"]
    readonly_fields = ["in_use"]

    @admin.display(description="In use")
    def in_use(self, quota: GpuQuota) -> str:
        return _in_use(quota)


class TeamInUseAdmin(TeamAdmin):
    inlines = [MembershipInline, GpuQuotaInUseInline]


class GpuQuotaInUseAdmin(GpuQuotaAdmin):
    list_display = ["team", "resource", "limit", "in_use", "updated_at"]

    @admin.display(description="In use")
    def in_use(self, quota: GpuQuota) -> str:
        return _in_use(quota)


admin.site.unregister(Team)
admin.site.register(Team, TeamInUseAdmin)
admin.site.unregister(GpuQuota)
admin.site.register(GpuQuota, GpuQuotaInUseAdmin)
