"""Writes for teams, quotas, API tokens and the audit log."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone

from portal.models import ApiToken, AuditLog, GpuQuota, Team
from portal.selectors import api_token_by_digest

TOKEN_PREFIX_LEN = 8


def audit_record(
    *,
    actor: User | AnonymousUser | None,
    action: str,
    target: object | str = "",
    changes: dict[str, Any] | None = None,
    ip_address: str | None = None,
) -> AuditLog:
    """Append one row to the audit log (who, what, old → new)."""
    entry = audit_entry(
        actor=actor, action=action, target=target, changes=changes, ip_address=ip_address
    )
    entry.save(force_insert=True)
    return entry


def audit_entry(
    *,
    actor: User | AnonymousUser | None,
    action: str,
    target: object | str = "",
    changes: dict[str, Any] | None = None,
    ip_address: str | None = None,
) -> AuditLog:
    """The audit log row ``audit_record`` appends, not saved yet (for ``rows_insert``)."""
    user = actor if isinstance(actor, User) else None
    return AuditLog(
        actor=user,
        action=action,
        target_type=type(target).__name__ if not isinstance(target, str) else "",
        target=str(target)[:200],
        changes=changes or {},
        ip_address=ip_address,
    )


def quota_change_record(
    *,
    actor: User | AnonymousUser | None,
    team: Team,
    resource: str,
    old_limit: int | None,
    new_limit: int | None,
) -> AuditLog | None:
    """Record a quota change made anywhere (admin form, inline, service)."""
    if old_limit == new_limit:
        return None
    action = (
        "quota.create"
        if old_limit is None
        else "quota.delete"
        if new_limit is None
        else "quota.update"
    )
    return audit_record(
        actor=actor,
        action=action,
        target=f"{team.slug}/{resource}",
        changes={"team": team.slug, "resource": resource, "old": old_limit, "new": new_limit},
    )


@transaction.atomic
def quota_set(
    *, actor: User | AnonymousUser | None, team: Team, resource: str, limit: int
) -> GpuQuota:
    """Create or change a team's quota on one resource, writing the audit log."""
    quota = GpuQuota.objects.select_for_update().filter(team=team, resource=resource).first()
    old = quota.limit if quota else None
    if quota is None:
        quota = GpuQuota.objects.create(team=team, resource=resource, limit=limit)
    elif quota.limit != limit:
        quota.limit = limit
        quota.save(update_fields=["limit", "updated_at"])
    quota_change_record(actor=actor, team=team, resource=resource, old_limit=old, new_limit=limit)
    return quota


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def api_token_create(
    *,
    user: User,
    description: str = "",
    ttl_days: int | None = None,
    actor: User | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns the row and the secret (shown once, never stored)."""
    secret = "gpp_" + secrets.token_urlsafe(32)
    days = settings.API_TOKEN_TTL_DAYS if ttl_days is None else ttl_days
    token = ApiToken.objects.create(
        user=user,
        prefix=secret[: TOKEN_PREFIX_LEN + 4],
        digest=_digest(secret),
        description=description[:100],
        expires_at=timezone.now() + timedelta(days=days) if days > 0 else None,
    )
    audit_record(
        actor=actor or user,
        action="token.create",
        target=f"{user.get_username()}:{token.prefix}",
        changes={"expires_at": token.expires_at.isoformat() if token.expires_at else None},
    )
    return token, secret


def api_token_authenticate(*, secret: str) -> ApiToken | None:
    """The live token with this secret, or None (unknown, expired or revoked)."""
    now = timezone.now()
    token = api_token_by_digest(_digest(secret))
    if token is None or (token.expires_at is not None and token.expires_at <= now):
        return None
    if not token.user.is_active:
        return None
    # Cheap bookkeeping; at most one write a minute per token.
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def api_token_revoke(*, token: ApiToken, actor: User | None = None) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="token.revoke", target=str(token))
