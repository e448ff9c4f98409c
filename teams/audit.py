"""The audit log's one writer (a module of its own: the cluster mirror audits too, and the
team services import the mirror's tasks)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User

from teams.models import AuditLog

Actor = User | AnonymousUser | None


def audit_record(
    *,
    actor: Actor,
    action: str,
    target: object | str = "",
    changes: dict[str, Any] | None = None,
    ip_address: str | None = None,
) -> AuditLog:
    """Append one row to the audit log (who, what, old → new)."""
    return AuditLog.objects.create(
        actor=actor if isinstance(actor, User) else None,
        action=action,
        target_type=type(target).__name__ if not isinstance(target, str) else "",
        target=str(target)[:200],
        changes=changes or {},
        ip_address=ip_address,
    )
