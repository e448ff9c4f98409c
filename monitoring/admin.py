"""GPU-hour accounting in the admin console: prices (audited), the rolled-up days (read
only, with "re-build"), and each job's day rows (read only)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from monitoring.accounting import usage_rollup_day
from monitoring.models import GpuPrice, GpuUsageDay, NodeFailure, RollupDay
from teams.admin import AuditedDeleteAdmin, ReadOnlyAdmin
from teams.audit import audit_record


@admin.register(GpuPrice)
class GpuPriceAdmin(AuditedDeleteAdmin):
    audit_prefix = "gpu_price"
    list_display = ["product", "price_per_gpu_hour", "effective_from", "created_at"]
    list_filter = ["product"]
    search_fields = ["product"]
    ordering = ["product", "-effective_from"]

    def save_model(
        self, request: HttpRequest, obj: GpuPrice, form: ModelForm, change: bool
    ) -> None:
        old = GpuPrice.objects.filter(pk=obj.pk).first() if change else None
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action="gpu_price.change" if change else "gpu_price.create",
            target=obj,
            changes={
                "price_per_gpu_hour": [
                    None if old is None else str(old.price_per_gpu_hour),
                    str(obj.price_per_gpu_hour),
                ],
                "effective_from": [
                    None if old is None else str(old.effective_from),
                    str(obj.effective_from),
                ],
            },
            ip_address=request.META.get("REMOTE_ADDR"),
        )


@admin.register(RollupDay)
class RollupDayAdmin(ReadOnlyAdmin):
    list_display = ["day", "complete", "measured", "jobs", "rolled_up_at", "seconds", "error"]
    list_filter = ["complete", "measured"]
    date_hierarchy = "day"
    actions = ["rebuild"]

    @admin.action(description="Re-build the selected days (allocation, metrics, cost)")
    def rebuild(self, request: HttpRequest, queryset: QuerySet[RollupDay]) -> None:
        for day in queryset.order_by("day").values_list("day", flat=True):
            result = usage_rollup_day(day=day)
            level = messages.SUCCESS if result.measured else messages.WARNING
            text = f"{day}: {result.jobs} jobs" + (
                f", without metrics ({result.error})" if result.error else ""
            )
            self.message_user(request, text, level)
            audit_record(actor=request.user, action="usage.rebuild", target=f"{day}")


@admin.register(GpuUsageDay)
class GpuUsageDayAdmin(ReadOnlyAdmin):
    list_display = [
        "day",
        "team",
        "user",
        "job_name",
        "product",
        "gpu_hours_allocated",
        "gpu_hours_used",
        "idle_gpu_hours",
        "cost",
    ]
    list_filter = ["team", "product"]
    search_fields = ["job_name", "user__username", "team__slug"]
    list_select_related = ["team", "user"]
    date_hierarchy = "day"


@admin.register(NodeFailure)
class NodeFailureAdmin(ReadOnlyAdmin):
    """Each node's GPU failure history (XIDs that failed jobs), newest first."""

    list_display = ["at", "node", "gpu", "xid", "job", "pod"]
    list_filter = ["node", "xid"]
    search_fields = ["node", "pod"]
    date_hierarchy = "at"
