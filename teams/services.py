"""Writes for teams, memberships and quotas, each with its audit log entry.

The admin, the API and the management commands all change teams through these, so every
change is audited the same way and mirrored into the cluster on commit.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction

from teams.models import AuditLog, GpuQuota, Membership, Team
from teams.tasks import team_sync_enqueue

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


def _quota_audit(
    *, actor: Actor, team: Team, resource: str, old_limit: int | None, new_limit: int | None
) -> None:
    if old_limit == new_limit:
        return
    action = (
        "quota.create"
        if old_limit is None
        else "quota.delete"
        if new_limit is None
        else "quota.update"
    )
    audit_record(
        actor=actor,
        action=action,
        target=f"{team.slug}/{resource}",
        changes={"team": team.slug, "resource": resource, "old": old_limit, "new": new_limit},
    )


@transaction.atomic
def quota_set(*, actor: Actor, team: Team, resource: str, limit: int) -> GpuQuota:
    """Create or change a team's quota on one resource; audited, mirrored into the cluster.

    The row is locked while it changes, so two admins saving at once both land in the
    audit log with the limit each of them replaced.
    """
    quota = GpuQuota.objects.select_for_update().filter(team=team, resource=resource).first()
    old = quota.limit if quota else None
    if quota is None:
        quota = GpuQuota.objects.create(team=team, resource=resource, limit=limit)
    elif quota.limit != limit:
        quota.limit = limit
        quota.save(update_fields=["limit", "updated_at"])
    _quota_audit(actor=actor, team=team, resource=resource, old_limit=old, new_limit=limit)
    if old != limit:
        team_sync_enqueue(team_id=team.pk)
    return quota


@transaction.atomic
def quota_delete(*, actor: Actor, team: Team, resource: str) -> None:
    """Remove a team's quota on one resource (the team may then use none of it)."""
    quota = GpuQuota.objects.select_for_update().filter(team=team, resource=resource).first()
    if quota is None:
        return
    quota.delete()
    _quota_audit(actor=actor, team=team, resource=resource, old_limit=quota.limit, new_limit=None)
    team_sync_enqueue(team_id=team.pk)


@transaction.atomic
def team_save(*, actor: Actor, team: Team) -> Team:
    """Create or change a team: its namespace defaults to ``team-<slug>``; a new team is
    audited; either way its namespace, ResourceQuota and LimitRange follow on commit."""
    created = team.pk is None
    if not team.namespace:
        team.namespace = f"team-{team.slug}"
    team.save()
    if created:
        audit_record(actor=actor, action="team.create", target=team)
    team_sync_enqueue(team_id=team.pk)
    return team


@transaction.atomic
def membership_set(*, actor: Actor, team: Team, user: User, role: str) -> Membership:
    """Add ``user`` to ``team`` with ``role``, or change the role they have; audited."""
    membership, created = Membership.objects.select_for_update().get_or_create(
        team=team, user=user, defaults={"role": role}
    )
    if not created and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    elif not created:
        return membership
    audit_record(
        actor=actor,
        action="membership.create" if created else "membership.update",
        target=membership,
        changes={"role": role},
    )
    return membership


@transaction.atomic
def membership_delete(*, actor: Actor, membership: Membership) -> None:
    """Remove a member from a team; audited."""
    audit_record(actor=actor, action="membership.delete", target=membership)
    membership.delete()
