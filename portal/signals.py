"""Audit log entries for authentication events (Django sends these; we only record them)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from teams.services import audit_record


def _ip(request: HttpRequest | None) -> str | None:
    if request is None:
        return None
    return request.META.get("REMOTE_ADDR") or None


@receiver(user_logged_in)
def _logged_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    audit_record(
        actor=user, action="auth.login", target=user.get_username(), ip_address=_ip(request)
    )


@receiver(user_logged_out)
def _logged_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is not None:
        audit_record(
            actor=user, action="auth.logout", target=user.get_username(), ip_address=_ip(request)
        )


@receiver(user_login_failed)
def _login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    # Never the password: Django already masks it, and we keep only the username.
    audit_record(
        actor=None,
        action="auth.login_failed",
        target=str(credentials.get("username", ""))[:150],
        ip_address=_ip(request),
    )
