"""The admin console for platform admins: teams, members, quotas, GPU catalog, audit log.

Quota changes made here, on the quota page or inline on a team, go through
``quota_change_record`` so the audit log always says who changed what, old → new.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import BaseInlineFormSet, ModelForm
from django.http import HttpRequest

from jobs.quota import format_amount
from jobs.selectors import team_usage
from jobs.tasks import team_sync_enqueue
from portal.models import (
    ApiToken,
    AuditLog,
    CatalogSettings,
    GpuProduct,
    GpuQuota,
    Membership,
    MigProfile,
    Team,
)
from portal.services import api_token_revoke, audit_record, quota_change_record


def _old_limit(quota: GpuQuota) -> int | None:
    if quota.pk is None:
        return None
    return GpuQuota.objects.filter(pk=quota.pk).values_list("limit", flat=True).first()


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class GpuQuotaInline(admin.TabularInline):
    model = GpuQuota
    extra = 1
    fields = ["resource", "limit", "in_use"]
    readonly_fields = ["in_use"]

    @admin.display(description="In use")
    def in_use(self, quota: GpuQuota) -> str:
        if quota.pk is None:
            return "—"
        return format_amount(quota.resource, team_usage(team=quota.team).get(quota.resource, 0))


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "namespace", "member_count", "quota_summary", "created_at"]
    search_fields = ["slug", "name", "namespace"]
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline, GpuQuotaInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        return super().get_queryset(request).prefetch_related("quotas", "memberships")

    @admin.display(description="Members")
    def member_count(self, team: Team) -> int:
        return len(team.memberships.all())

    @admin.display(description="Quotas")
    def quota_summary(self, team: Team) -> str:
        return ", ".join(f"{q.limit}×{q.resource}" for q in team.quotas.all()) or "—"

    def save_model(self, request: HttpRequest, obj: Team, form: ModelForm, change: bool) -> None:
        if not obj.namespace:
            obj.namespace = f"team-{obj.slug}"
        super().save_model(request, obj, form, change)
        if not change:
            audit_record(actor=request.user, action="team.create", target=obj)
        team_sync_enqueue(team_id=obj.pk)

    def save_formset(
        self, request: HttpRequest, form: ModelForm, formset: BaseInlineFormSet, change: bool
    ) -> None:
        if formset.model is GpuQuota:
            before = {q.pk: q.limit for q in GpuQuota.objects.filter(team=form.instance)}
            instances = formset.save(commit=False)
            for quota in formset.deleted_objects:
                quota_change_record(
                    actor=request.user,
                    team=quota.team,
                    resource=quota.resource,
                    old_limit=before.get(quota.pk),
                    new_limit=None,
                )
                quota.delete()
            for quota in instances:
                old = before.get(quota.pk) if quota.pk else None
                quota.save()
                quota_change_record(
                    actor=request.user,
                    team=quota.team,
                    resource=quota.resource,
                    old_limit=old,
                    new_limit=quota.limit,
                )
            formset.save_m2m()
            return
        if formset.model is Membership:
            instances = formset.save(commit=False)
            for membership in formset.deleted_objects:
                audit_record(actor=request.user, action="membership.delete", target=membership)
                membership.delete()
            for membership in instances:
                action = "membership.update" if membership.pk else "membership.create"
                membership.save()
                audit_record(
                    actor=request.user,
                    action=action,
                    target=membership,
                    changes={"role": membership.role},
                )
            formset.save_m2m()
            return
        super().save_formset(request, form, formset, change)


@admin.register(GpuQuota)
class GpuQuotaAdmin(admin.ModelAdmin):
    list_display = ["team", "resource", "limit", "in_use", "updated_at"]
    list_filter = ["team", "resource"]
    search_fields = ["team__slug", "team__name", "resource"]
    list_select_related = ["team"]
    autocomplete_fields = ["team"]

    @admin.display(description="In use")
    def in_use(self, quota: GpuQuota) -> str:
        return format_amount(quota.resource, team_usage(team=quota.team).get(quota.resource, 0))

    def save_model(
        self, request: HttpRequest, obj: GpuQuota, form: ModelForm, change: bool
    ) -> None:
        old = _old_limit(obj)
        super().save_model(request, obj, form, change)
        quota_change_record(
            actor=request.user,
            team=obj.team,
            resource=obj.resource,
            old_limit=old,
            new_limit=obj.limit,
        )
        team_sync_enqueue(team_id=obj.team_id)

    def delete_model(self, request: HttpRequest, obj: GpuQuota) -> None:
        quota_change_record(
            actor=request.user,
            team=obj.team,
            resource=obj.resource,
            old_limit=obj.limit,
            new_limit=None,
        )
        super().delete_model(request, obj)
        team_sync_enqueue(team_id=obj.team_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[GpuQuota]) -> None:
        for quota in queryset.select_related("team"):
            self.delete_model(request, quota)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", "created_at"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__slug"]
    autocomplete_fields = ["user", "team"]

    def save_model(
        self, request: HttpRequest, obj: Membership, form: ModelForm, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action="membership.update" if change else "membership.create",
            target=obj,
            changes={"role": obj.role},
        )

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        audit_record(actor=request.user, action="membership.delete", target=obj)
        super().delete_model(request, obj)


@admin.register(GpuProduct)
class GpuProductAdmin(admin.ModelAdmin):
    list_display = ["name", "memory_mib", "gpus_per_node", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name"]


@admin.register(MigProfile)
class MigProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "memory_gib", "max_per_node", "enabled"]
    list_filter = ["enabled"]


@admin.register(CatalogSettings)
class CatalogSettingsAdmin(admin.ModelAdmin):
    list_display = ["__str__", "shared_gpu_resource", "max_shared_per_node"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not CatalogSettings.objects.exists()


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "target", "changes", "ip_address"]
    list_filter = ["action", "created_at"]
    search_fields = ["target", "actor__username", "action"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "prefix",
        "user",
        "description",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    ]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "user__username", "description"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Secrets are shown once: create tokens with `manage.py create_api_token`.
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            api_token_revoke(token=token, actor=request.user)  # type: ignore[arg-type]
        messages.success(request, f"Revoked {queryset.count()} token(s).")
