"""Job templates: saved specs a user or a team starts new jobs from.

Writes (``template_create``, ``template_update``, ``template_delete``); the reads are in
``jobs.selectors.templates``. A template holds any subset of a spec's fields, checked field by
field as a submission checks them; the whole spec is checked when a job is submitted.
"""

from __future__ import annotations

import copy
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from core.api_errors import flatten_errors
from core.errors import ApplicationError, Conflict, PermissionDenied
from jobs.models import Job, JobTemplate
from jobs.selectors.templates import template_get_for_user
from jobs.spec import spec_submittable
from jobs.spec_input import JobSpecInput, PrintableAscii
from teams.models import Membership, Team
from teams.selectors import membership_role, teams_for_user
from teams.services import audit_record

_NAME_CHECK = PrintableAscii("a template name", "pytorch-a100-8")


def template_spec_check(spec: Any) -> dict[str, Any]:
    """The fields of a template's spec, each checked as a submission checks it.

    Missing fields are fine (a template is a starting point); unknown fields, wrong types
    and bad values are refused with the field named, as ``POST /api/v1/jobs/`` names them.
    """
    if not isinstance(spec, dict):
        raise ApplicationError(
            "spec: a template's spec must be a JSON object of job fields.",
            field_errors={"spec": ['Must be a JSON object of job fields, e.g. {"gpu": …}.']},
        )
    serializer = JobSpecInput(data=spec, partial=True)
    if not serializer.is_valid():
        errors = {
            f"spec.{field}": messages
            for field, messages in flatten_errors(serializer.errors).items()
        }
        first = next(iter(errors.items()))
        raise ApplicationError(f"{first[0]}: {first[1][0]}", field_errors=errors)
    # What the caller sent, not the serializer's output: a template keeps only the fields
    # it was given (no defaults filled in), in their JSON form.
    return copy.deepcopy(spec)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ApplicationError(
            "name: give the template a name, e.g. pytorch-a100-8.",
            field_errors={"name": ["Give the template a name, e.g. pytorch-a100-8."]},
        )
    name = name.strip()
    problems = []
    if len(name) > 63:
        problems.append("At most 63 characters.")
    if "/" in name:
        problems.append("No '/': TEAM/NAME is how a team's template is named from outside.")
    try:
        _NAME_CHECK(name)
    except Exception as exc:  # noqa: BLE001 - DRF's ValidationError carries the words
        problems.append(str(getattr(exc, "detail", [exc])[0]))
    if problems:
        raise ApplicationError(f"name: {problems[0]}", field_errors={"name": problems})
    return name


def _team_for_lead(*, user: User, slug: str) -> Team:
    team = teams_for_user(user=user).filter(slug=slug).first()
    if team is None:
        raise ApplicationError(
            f"team: you are not a member of a team '{slug}'.",
            field_errors={"team": [f"You are not a member of a team '{slug}'."]},
        )
    if membership_role(user=user, team=team) != Membership.Role.LEAD:
        raise PermissionDenied(
            f"Only a lead of team {team.slug} manages its templates; save it as your own "
            "template instead (leave out 'team')."
        )
    return team


def _check_may_change(*, user: User, template: JobTemplate) -> None:
    if template.team is None:
        if template.owner_id != user.pk:
            raise PermissionDenied("Only its owner changes a personal template.")
        return
    if membership_role(user=user, team=template.team) != Membership.Role.LEAD:
        raise PermissionDenied(
            f"Only a lead of team {template.team.slug} changes the team's templates."
        )


def _save(template: JobTemplate) -> None:
    try:
        with transaction.atomic():
            template.save()
    except IntegrityError:
        whose = f"team {template.team.slug}" if template.team is not None else "you"
        raise Conflict(
            f"name: {whose} already have a template named '{template.name}'; "
            "choose another name or update that one.",
            field_errors={"name": [f"Already taken by another template of {whose}."]},
        ) from None


@transaction.atomic
def template_create(
    *,
    user: User,
    name: Any,
    spec: Any,
    team: str | None = None,
    description: str = "",
) -> JobTemplate:
    """Save a template: the user's own, or (``team``) the team's, which needs a lead."""
    template = JobTemplate(
        name=_check_name(name),
        description=(description or "")[:200],
        spec=template_spec_check(spec),
        created_by=user,
    )
    if team:
        template.team = _team_for_lead(user=user, slug=team)
    else:
        template.owner = user
    _save(template)
    audit_record(
        actor=user, action="template.create", target=template, changes={"name": template.name}
    )
    return template


@transaction.atomic
def template_update(
    *,
    user: User,
    template_id: int,
    name: Any = None,
    spec: Any = None,
    description: str | None = None,
) -> JobTemplate:
    template = template_get_for_user(user=user, template_id=template_id)
    _check_may_change(user=user, template=template)
    before = {"name": template.name, "spec": template.spec}
    if name is not None:
        template.name = _check_name(name)
    if spec is not None:
        template.spec = template_spec_check(spec)
    if description is not None:
        template.description = description[:200]
    _save(template)
    after = {"name": template.name, "spec": template.spec}
    changes = {k: [before[k], after[k]] for k in before if before[k] != after[k]}
    audit_record(actor=user, action="template.update", target=template, changes=changes)
    return template


@transaction.atomic
def template_delete(*, user: User, template_id: int) -> None:
    template = template_get_for_user(user=user, template_id=template_id)
    _check_may_change(user=user, template=template)
    audit_record(
        actor=user, action="template.delete", target=template, changes={"name": template.name}
    )
    template.delete()


def template_from_job(*, user: User, job: Job, name: Any, team: str | None = None) -> JobTemplate:
    """ "Save as template" on a job's page: its spec, without the name that made it unique."""
    spec = {k: v for k, v in spec_submittable(job.spec).items() if k != "name"}
    if isinstance(spec.get("gpu"), dict):
        spec["gpu"] = {k: v for k, v in spec["gpu"].items() if v is not None}
    return template_create(
        user=user,
        name=name,
        spec=spec,
        team=team,
        description=f"Saved from job #{job.pk} ({job.team.slug}/{job.name}).",
    )
