"""Job templates as a user reads them: theirs and their teams', found by id or name, and
the spec a submission starts from (the template with the caller's fields over it)."""

from __future__ import annotations

import copy
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet

from core.errors import ApplicationError, NotFound
from jobs.models import JobTemplate
from teams.selectors import teams_for_user

# Fields a caller's values merge into rather than replace: a template's GPU product stays
# when only the count is overridden, and its environment keeps the keys not overridden.
MERGED_FIELDS = ("gpu", "env")


def templates_for_user(*, user: User | AnonymousUser) -> QuerySet[JobTemplate]:
    """The user's own templates and their teams' (platform admins: every team's)."""
    if not user.is_authenticated:
        return JobTemplate.objects.none()
    return (
        JobTemplate.objects.filter(Q(owner=user) | Q(team__in=teams_for_user(user=user)))
        .select_related("team", "owner")
        .order_by("team__slug", "name", "id")
    )


def template_get_for_user(*, user: User | AnonymousUser, template_id: int) -> JobTemplate:
    template = templates_for_user(user=user).filter(pk=template_id).first()
    if template is None:
        raise NotFound(f"No template #{template_id} among yours and your teams'.")
    return template


def template_find(*, user: User | AnonymousUser, name: str) -> JobTemplate:
    """A template by name: ``NAME`` (the user's own first, then a team's if only one team
    has it) or ``TEAM/NAME`` for a team's."""
    found = templates_for_user(user=user)
    if "\x00" in name:
        # No template has a NUL in its name, and PostgreSQL refuses to compare one.
        found = found.none()
    if "/" in name:
        team, _, short = name.partition("/")
        match = list(found.filter(team__slug=team, name=short))
    else:
        own = list(found.filter(owner=user.pk, name=name))
        match = own or list(found.filter(team__isnull=False, name=name))
    if not match:
        raise NotFound(
            f"No template named '{name}' among yours and your teams'; "
            "list them with GET /api/v1/templates/."
        )
    if len(match) > 1:
        names = ", ".join(f"{t.team.slug}/{t.name}" for t in match if t.team is not None)
        raise ApplicationError(
            f"template: several teams have a template '{name}' ({names}); name one as TEAM/NAME.",
            field_errors={"template": [f"Several teams have '{name}': use one of {names}."]},
        )
    return match[0]


def spec_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The template's spec with the caller's fields over it (``gpu`` and ``env`` merged key
    by key, every other field replaced)."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if key in MERGED_FIELDS and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def spec_from_template(
    *, user: User | AnonymousUser, template: str | int, data: Any
) -> dict[str, Any]:
    """A submission's spec: the named (or numbered) template with ``data`` over it.

    A team template fills in its team unless the caller names another of theirs."""
    if not isinstance(data, dict):
        data = {}
    found = (
        template_get_for_user(user=user, template_id=template)
        if isinstance(template, int)
        else template_find(user=user, name=template)
    )
    base = dict(found.spec)
    if found.team is not None and "team" not in base:
        base["team"] = found.team.slug
    return spec_merge(base, data)
