"""Teams, members, quotas and the audit log in the admin console.

Every change made here goes through the teams services (``team_save``, ``quota_set``,
``quota_delete``, ``membership_set``, ``membership_delete``): the same writes the API and
the management commands make, so the audit log always says who changed what, old → new,
and the cluster follows on commit.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import QuerySet
from django.forms import BaseInlineFormSet, ModelForm
from django.http import HttpRequest

from cluster.models import Cluster
from teams.audit import audit_record
from teams.models import (
    AuditLog,
    Cohort,
    GpuQuota,
    GroupMapping,
    Membership,
    SsoIdentity,
    Team,
)
from teams.services import (
    cohort_delete,
    cohort_save,
    membership_delete,
    membership_set,
    quota_delete,
    quota_set,
    team_save,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class GpuQuotaInline(admin.TabularInline):
    model = GpuQuota
    extra = 1
    fields = ["cluster", "resource", "limit", "borrowing_limit", "lending_limit"]


def _quota_form_save(request: HttpRequest, form: ModelForm, team: Team) -> GpuQuota:
    """Save one quota form through the services: a row moved to another team or resource
    is the old quota deleted and the new one set, each audited."""
    quota: GpuQuota = form.instance
    old_team, old_resource = form.initial.get("team"), form.initial.get("resource")
    old_cluster = form.initial.get("cluster")
    if quota.pk is not None and (
        old_resource != quota.resource
        or (old_team is not None and old_team != team.pk)
        or old_cluster != quota.cluster_id
    ):
        old = Team.objects.get(pk=old_team) if old_team is not None else team
        quota_delete(
            actor=request.user,
            team=old,
            resource=str(old_resource),
            cluster=Cluster.objects.filter(pk=old_cluster).first() if old_cluster else None,
        )
    return quota_set(
        actor=request.user,
        team=team,
        resource=quota.resource,
        limit=quota.limit,
        borrowing_limit=quota.borrowing_limit,
        lending_limit=quota.lending_limit,
        cluster=quota.cluster,
    )


def _membership_form_save(request: HttpRequest, form: ModelForm, team: Team) -> Membership:
    """Save one membership form through the services: a row moved to another team or user
    is the old membership deleted and the new one set, each audited."""
    membership: Membership = form.instance
    old_team, old_user = form.initial.get("team"), form.initial.get("user")
    if membership.pk is not None and (
        old_user != membership.user_id or (old_team is not None and old_team != team.pk)
    ):
        membership_delete(actor=request.user, membership=Membership.objects.get(pk=membership.pk))
    return membership_set(actor=request.user, team=team, user=membership.user, role=membership.role)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "name",
        "namespace",
        "cohort",
        "weight",
        "idle_policy",
        "member_count",
        "quota_summary",
        "created_at",
    ]
    list_filter = ["cohort", "idle_policy"]
    search_fields = ["slug", "name", "namespace"]
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline, GpuQuotaInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        return (
            super()
            .get_queryset(request)
            .select_related("cohort")
            .prefetch_related("quotas", "memberships")
        )

    @admin.display(description="Members")
    def member_count(self, team: Team) -> int:
        return len(team.memberships.all())

    @admin.display(description="Quotas")
    def quota_summary(self, team: Team) -> str:
        return ", ".join(f"{q.limit}×{q.resource}" for q in team.quotas.all()) or "—"

    def save_model(self, request: HttpRequest, obj: Team, form: ModelForm, change: bool) -> None:
        team_save(actor=request.user, team=obj)

    def save_formset(
        self, request: HttpRequest, form: ModelForm, formset: BaseInlineFormSet, change: bool
    ) -> None:
        team: Team = form.instance
        # Finds what changed (the admin's change message reads it) and writes nothing:
        # the services below do the writing.
        formset.save(commit=False)
        if formset.model is GpuQuota:
            for deleted in formset.deleted_forms:
                if deleted.instance.pk is not None:
                    quota_delete(
                        actor=request.user, team=team, resource=deleted.initial["resource"]
                    )
            for quota_form in formset.forms:
                if quota_form in formset.deleted_forms or not quota_form.has_changed():
                    continue
                quota_form.instance = _quota_form_save(request, quota_form, team)
            return
        if formset.model is Membership:
            for deleted in formset.deleted_forms:
                if deleted.instance.pk is not None:
                    membership_delete(actor=request.user, membership=deleted.instance)
            for member_form in formset.forms:
                if member_form in formset.deleted_forms or not member_form.has_changed():
                    continue
                member_form.instance = _membership_form_save(request, member_form, team)
            return
        super().save_formset(request, form, formset, change)


class CohortTeamInline(admin.TabularInline):
    """The cohort's teams, read-only: a team joins or leaves on its own page (audited)."""

    model = Team
    fields = ["slug", "name", "weight", "inference_may_borrow"]
    readonly_fields = ["slug", "name", "weight", "inference_may_borrow"]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "team_list", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ("name",)}
    inlines = [CohortTeamInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cohort]:
        return super().get_queryset(request).prefetch_related("teams")

    @admin.display(description="Teams")
    def team_list(self, cohort: Cohort) -> str:
        return ", ".join(t.slug for t in cohort.teams.all()) or "—"

    def save_model(self, request: HttpRequest, obj: Cohort, form: ModelForm, change: bool) -> None:
        cohort_save(actor=request.user, cohort=obj)

    def delete_model(self, request: HttpRequest, obj: Cohort) -> None:
        cohort_delete(actor=request.user, cohort=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Cohort]) -> None:
        for cohort in queryset:
            self.delete_model(request, cohort)


@admin.register(GpuQuota)
class GpuQuotaAdmin(admin.ModelAdmin):
    list_display = [
        "team",
        "cluster_name",
        "resource",
        "limit",
        "borrowing_limit",
        "lending_limit",
        "updated_at",
    ]
    list_filter = ["team", "cluster", "resource"]
    search_fields = ["team__slug", "team__name", "resource", "cluster__name"]
    list_select_related = ["team", "cluster"]
    autocomplete_fields = ["team"]

    def save_model(
        self, request: HttpRequest, obj: GpuQuota, form: ModelForm, change: bool
    ) -> None:
        saved = _quota_form_save(request, form, obj.team)
        obj.pk, obj.updated_at = saved.pk, saved.updated_at

    @admin.display(description="cluster", ordering="cluster__name")
    def cluster_name(self, quota: GpuQuota) -> str:
        return (
            quota.cluster.name if quota.cluster is not None else f"{settings.CLUSTER_NAME} (first)"
        )

    def delete_model(self, request: HttpRequest, obj: GpuQuota) -> None:
        quota_delete(actor=request.user, team=obj.team, resource=obj.resource, cluster=obj.cluster)

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
        obj.pk = _membership_form_save(request, form, obj.team).pk

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        membership_delete(actor=request.user, membership=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        for membership in queryset.select_related("team", "user"):
            self.delete_model(request, membership)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the admin shows and never edits (the audit log, rolled-up accounting)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AuditedDeleteAdmin(admin.ModelAdmin):
    """Deletions from the admin (one row, or the bulk action) each get an audit entry
    ``<audit_prefix>.delete``."""

    audit_prefix = ""

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        audit_record(actor=request.user, action=f"{self.audit_prefix}.delete", target=obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            audit_record(actor=request.user, action=f"{self.audit_prefix}.delete", target=obj)
        super().delete_queryset(request, queryset)


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "action", "target", "changes", "ip_address"]
    list_filter = ["action", "created_at"]
    search_fields = ["target", "actor__username", "action"]
    date_hierarchy = "created_at"


@admin.register(GroupMapping)
class GroupMappingAdmin(AuditedDeleteAdmin):
    """Identity-provider groups → teams and roles (or platform admin); audited. Memberships
    follow them at each user's next sign-on."""

    audit_prefix = "group_mapping"
    list_display = ["group", "team", "role", "platform_admin"]
    list_filter = ["platform_admin", "role", "team"]
    search_fields = ["group", "team__slug"]
    list_select_related = ["team"]

    def save_model(
        self, request: HttpRequest, obj: GroupMapping, form: ModelForm, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action="group_mapping.update" if change else "group_mapping.create",
            target=obj,
            changes={"group": obj.group, "team": obj.team.slug if obj.team else None,
                     "role": obj.role, "platform_admin": obj.platform_admin},
        )  # fmt: skip


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    """Who signed on from where, with the groups of their last sign-on (read only)."""

    list_display = ["user", "subject", "issuer", "groups", "last_login"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "groups", "last_login"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
