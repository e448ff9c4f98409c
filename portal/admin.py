"""API tokens in the admin console: listed and revoked (secrets are shown once, at creation)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.models import ApiToken
from portal.services import api_token_revoke


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
