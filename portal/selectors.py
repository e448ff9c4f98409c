"""Reads for API tokens."""

from __future__ import annotations

from portal.models import ApiToken


def api_token_by_digest(digest: str) -> ApiToken | None:
    """The unrevoked token with this digest, its user loaded with it (expiry and the user's
    ``is_active`` are the caller's to check). Every API request reads it: one indexed
    lookup (``digest`` is unique)."""
    try:
        return ApiToken.objects.select_related("user").get(digest=digest, revoked_at__isnull=True)
    except ApiToken.DoesNotExist:
        return None
