"""Writes for teams, memberships and quotas, each with its audit log entry.

The admin, the API and the management commands all change teams through these, so every
change is audited the same way and mirrored into the cluster on commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from cluster.models import Cluster
from core.errors import ApplicationError
from teams.audit import Actor, audit_record
from teams.models import Cohort, GpuQuota, GroupMapping, Membership, Team
from teams.tasks import team_sync_enqueue

_QUOTA_FIELDS = ("limit", "borrowing_limit", "lending_limit")
# The old audit entries said only the limit: keep "old"/"new" for it, add the rest.
_UNSET = object()


def _quota_audit(
    *,
    actor: Actor,
    team: Team,
    resource: str,
    cluster: Cluster | None,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
) -> None:
    if old == new:
        return
    action = "quota.create" if old is None else "quota.delete" if new is None else "quota.update"
    changes: dict[str, Any] = {
        "team": team.slug,
        "resource": resource,
        "old": old["limit"] if old else None,
        "new": new["limit"] if new else None,
    }
    target = f"{team.slug}/{resource}"
    if cluster is not None:  # another than the first: named (the first's stay as they were)
        changes["cluster"] = cluster.name
        target = f"{team.slug}/{cluster.name}/{resource}"
    for name in _QUOTA_FIELDS[1:]:
        before, after = (old or {}).get(name), (new or {}).get(name)
        if before != after:
            changes[name] = {"old": before, "new": after}
    audit_record(actor=actor, action=action, target=target, changes=changes)


def _quota_locked(team: Team, resource: str, cluster: Cluster | None) -> GpuQuota | None:
    """The team's quota row on one resource of one cluster, locked until the transaction
    ends (so two admins saving at once are audited each with what they replaced)."""
    found: GpuQuota | None = (
        GpuQuota.objects.select_for_update()
        .filter(team=team, resource=resource, cluster=cluster)
        .order_by("pk")  # not the default order's joins: FOR UPDATE refuses outer ones
        .first()
    )
    return found


def _other_than_first(cluster: Cluster | None) -> Cluster | None:
    """How a quota row names its cluster: the first cluster as empty (as every row from
    before several clusters), so each team has one row per resource there."""
    return None if cluster is None or cluster.is_first else cluster


def _sync_with_cohort(team: Team, *also: int | None) -> None:
    """Mirror the team into the cluster, and every team of its cohort (and of the cohorts
    in ``also``): what a team may borrow, so its ResourceQuota, depends on the others'."""
    cohorts = {c for c in (team.cohort_id, *also) if c is not None}
    ids = {team.pk}
    if cohorts:
        ids |= set(Team.objects.filter(cohort_id__in=cohorts).values_list("pk", flat=True))
    for team_id in sorted(ids):
        team_sync_enqueue(team_id=team_id)


def _check_limits(limit: int, borrowing_limit: int | None, lending_limit: int | None) -> None:
    if lending_limit is not None and lending_limit > limit:
        raise ApplicationError(
            f"lending_limit: a team lends at most its nominal quota ({limit}); set "
            f"{limit} or less, or leave it empty to lend all of it.",
            field_errors={"lending_limit": ["Must not be more than the nominal quota."]},
        )
    for name, value in (("borrowing_limit", borrowing_limit), ("lending_limit", lending_limit)):
        if value is not None and value < 0:
            raise ApplicationError(
                f"{name}: must be 0 or more, or empty for no limit.",
                field_errors={name: ["Must be 0 or more."]},
            )


def _given(value: object, old: int | None) -> int | None:
    if value is _UNSET:
        return old
    assert value is None or isinstance(value, int)
    return value


@transaction.atomic
def quota_set(
    *,
    actor: Actor,
    team: Team,
    resource: str,
    limit: int,
    borrowing_limit: int | object | None = _UNSET,
    lending_limit: int | object | None = _UNSET,
    cluster: Cluster | None = None,
) -> GpuQuota:
    """Create or change a team's quota on one resource of one cluster (``None``: the first):
    its nominal ``limit`` and, in a cohort, its borrowing and lending limits (left as they
    are when not given); audited, mirrored into the clusters with the rest of the cohort.

    The row is locked while it changes, so two admins saving at once both land in the
    audit log with the values each of them replaced.
    """
    cluster = _other_than_first(cluster)
    quota = _quota_locked(team, resource, cluster)
    old = {f: getattr(quota, f) for f in _QUOTA_FIELDS} if quota else None
    new: dict[str, int | None] = {
        "limit": limit,
        "borrowing_limit": _given(borrowing_limit, (old or {}).get("borrowing_limit")),
        "lending_limit": _given(lending_limit, (old or {}).get("lending_limit")),
    }
    _check_limits(limit, new["borrowing_limit"], new["lending_limit"])
    if quota is None:
        quota = GpuQuota.objects.create(team=team, resource=resource, cluster=cluster, **new)
    elif old != new:
        for name, value in new.items():
            setattr(quota, name, value)
        quota.save(update_fields=[*_QUOTA_FIELDS, "updated_at"])
    _quota_audit(actor=actor, team=team, resource=resource, cluster=cluster, old=old, new=new)
    if old != new:
        _sync_with_cohort(team)
    return quota


@transaction.atomic
def quota_delete(
    *, actor: Actor, team: Team, resource: str, cluster: Cluster | None = None
) -> None:
    """Remove a team's quota on one resource of one cluster (``None``: the first): the team
    may then use none of it there."""
    cluster = _other_than_first(cluster)
    quota = _quota_locked(team, resource, cluster)
    if quota is None:
        return
    quota.delete()
    old = {f: getattr(quota, f) for f in _QUOTA_FIELDS}
    _quota_audit(actor=actor, team=team, resource=resource, cluster=cluster, old=old, new=None)
    _sync_with_cohort(team)


# Team fields whose changes the audit log records (old → new).
_TEAM_AUDITED = (
    "cohort_id",
    "weight",
    "inference_may_borrow",
    "spill_over_minutes",
    "idle_policy",
    "idle_threshold_percent",
    "idle_window_minutes",
    "idle_grace_minutes",
    "workspace_home_size",
    "workspace_leads_may_open",
    "workspace_may_borrow",
    "workspace_idle",
    "workspace_idle_minutes",
    "workspace_grace_minutes",
    "workspace_max_hours",
)


@transaction.atomic
def team_save(*, actor: Actor, team: Team) -> Team:
    """Create or change a team: its namespace defaults to ``team-<slug>``; a new team is
    audited, and so is a change of its cohort, weight or borrowing choice (old → new);
    either way its namespace, ResourceQuota and LimitRange (and those of the cohorts it
    leaves or joins) follow on commit."""
    created = team.pk is None
    before = Team.objects.filter(pk=team.pk).values(*_TEAM_AUDITED).first() if not created else None
    if not team.namespace:
        team.namespace = f"team-{team.slug}"
    team.save()
    if created:
        audit_record(actor=actor, action="team.create", target=team)
    elif before is not None:
        changes = {
            name.removesuffix("_id"): {
                "old": _plain(before[name]),
                "new": _plain(getattr(team, name)),
            }
            for name in _TEAM_AUDITED
            if before[name] != getattr(team, name)
        }
        if "cohort" in changes:
            slugs = dict(Cohort.objects.values_list("pk", "slug"))
            changes["cohort"] = {k: slugs.get(v) for k, v in changes["cohort"].items()}
        if changes:
            audit_record(actor=actor, action="team.update", target=team, changes=changes)
    _sync_with_cohort(team, before["cohort_id"] if before else None)
    return team


def _plain(value: Any) -> Any:
    return str(value.quantize(Decimal("0.01"))) if isinstance(value, Decimal) else value


@transaction.atomic
def cohort_save(*, actor: Actor, cohort: Cohort) -> Cohort:
    """Create or change a cohort; audited (old → new for its name and description)."""
    before = (
        Cohort.objects.filter(pk=cohort.pk).values("name", "slug", "description").first()
        if cohort.pk
        else None
    )
    cohort.save()
    if before is None:
        audit_record(actor=actor, action="cohort.create", target=cohort)
    else:
        changes = {
            k: {"old": v, "new": getattr(cohort, k)}
            for k, v in before.items()
            if v != getattr(cohort, k)
        }
        if changes:
            audit_record(actor=actor, action="cohort.update", target=cohort, changes=changes)
    return cohort


@transaction.atomic
def cohort_delete(*, actor: Actor, cohort: Cohort) -> None:
    """Dissolve a cohort: its teams keep their quotas and stop borrowing from each other."""
    team_ids = list(cohort.teams.values_list("pk", flat=True))
    audit_record(
        actor=actor,
        action="cohort.delete",
        target=cohort,
        changes={"teams": list(cohort.teams.values_list("slug", flat=True))},
    )
    cohort.delete()
    for team_id in team_ids:
        team_sync_enqueue(team_id=team_id)


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


@dataclass(frozen=True)
class GroupSync:
    """What a sign-on's groups gave: team slug → role, platform admin, and the changes."""

    teams: dict[str, str]
    platform_admin: bool
    changes: list[str]


@transaction.atomic
def memberships_from_groups(*, user: User, groups: Iterable[str]) -> GroupSync:
    """Make the user's memberships and platform-admin flag what their identity-provider
    groups map to (``GroupMapping``): memberships are added, re-roled and removed to match,
    each change audited (the actor is the sign-on: no person). Lead wins over member when
    two groups give the same team."""
    wanted: dict[int, tuple[Team, str]] = {}
    admin = False
    for mapping in GroupMapping.objects.filter(group__in=set(groups)).select_related("team"):
        admin = admin or mapping.platform_admin
        if mapping.team is None:
            continue
        held = wanted.get(mapping.team.pk)
        if held is None or mapping.role == Membership.Role.LEAD:
            wanted[mapping.team.pk] = (mapping.team, mapping.role)
    changes: list[str] = []
    current = {m.team_id: m for m in Membership.objects.filter(user=user).select_related("team")}
    for team_id, (team, role) in wanted.items():
        before = current.get(team_id)
        if before is None or before.role != role:
            membership_set(actor=None, team=team, user=user, role=role)
            changes.append(f"{'added to' if before is None else 'now ' + role + ' of'} {team.slug}")
    for team_id, membership in current.items():
        if team_id not in wanted:
            changes.append(f"removed from {membership.team.slug}")
            membership_delete(actor=None, membership=membership)
    if user.is_superuser != admin or user.is_staff != admin:
        audit_record(
            actor=None,
            action="user.platform_admin",
            target=user,
            changes={"platform_admin": [user.is_superuser, admin], "source": "sso groups"},
        )
        user.is_superuser = user.is_staff = admin
        user.save(update_fields=["is_superuser", "is_staff"])
        changes.append("platform admin" if admin else "no longer platform admin")
    return GroupSync(
        teams={team.slug: role for team, role in wanted.values()},
        platform_admin=admin,
        changes=changes,
    )
