"""Writes for API tokens: created (the secret shown once), checked, revoked."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from portal.models import ApiToken
from portal.selectors import api_token_by_digest
from teams.services import audit_record

TOKEN_PREFIX_LEN = 8


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
