"""Jobs in the admin console: read-only, for platform admins looking across teams."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from jobs.models import Job, JobEvent


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
