"""Pages for jobs (list, submit with a live YAML preview, detail, clone, cancel) and the
user's teams with what their jobs hold of each quota."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from cluster import kube
from cluster.launchers import launchers_offered_now
from cluster.selectors import catalog_get, cluster_choices
from core.errors import ApplicationError, PermissionDenied
from jobs.forms import JobForm, initial_from_spec
from jobs.manifests import to_yaml
from jobs.models import Job, JobState
from jobs.selectors import templates as template_selectors
from jobs.selectors.jobs import (
    job_cluster_name,
    job_get_for_user,
    job_list_page,
    queued_count,
    quota_usage_every_cluster,
)
from jobs.selectors.live import job_live_get, job_log_tail
from jobs.services import templates as template_services
from jobs.services.idle import job_idle_exempt, job_resume
from jobs.services.submit import job_can_cancel, job_cancel, job_preview, job_submit
from jobs.spec import spec_yaml
from teams.models import Membership
from teams.selectors import membership_role, team_roles_for_user, teams_for_user


def _form(request: HttpRequest, data: Any = None, initial: dict[str, Any] | None = None) -> JobForm:
    try:
        launchers = launchers_offered_now()
    except kube.ClusterError:
        launchers = []  # the cluster cannot be asked now: the portal's own Job still runs
    return JobForm(
        data,
        initial=initial,
        teams=list(teams_for_user(user=request.user)),
        catalog=catalog_get(),
        launchers=launchers,
        clusters=cluster_choices(),
    )


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    filters = {key: request.GET.get(key) or None for key in ("team", "state", "kind")}
    page = job_list_page(
        user=request.user,
        number=request.GET.get("page"),
        team=filters["team"],
        state=filters["state"],
        kind=filters["kind"],
    )
    query = "&".join(f"{k}={v}" for k, v in filters.items() if v)
    return render(
        request,
        "jobs/list.html",
        {
            "page": page,
            "filters": filters,
            "query": query,
            "teams": teams_for_user(user=request.user),
            "states": JobState.choices,
            "kinds": Job.Kind.choices,
        },
    )


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    form = _form(request, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        data = form.to_spec_data()
        if form.is_valid():  # reshaping (env lines, quotes) may have added errors
            cloned_from = _clone_source(request, request.POST.get("clone_of"))
            try:
                job = job_submit(
                    user=request.user,  # type: ignore[arg-type]
                    data=data,
                    cloned_from=cloned_from,
                )
            except ApplicationError as exc:
                form.add_spec_errors(exc.field_errors, exc.message)
            else:
                messages.success(request, f"Job {job.name} submitted: it is queued for admission.")
                return redirect("jobs:detail", job_id=job.pk)
    clone_of = request.GET.get("clone_of") or request.POST.get("clone_of")
    template = _template_source(request)
    if template is not None and request.method != "POST":
        # "New from template": the form starts from the template; every check still runs
        # on submit, and the preview answers "will it fit?" as for any job.
        spec = template_selectors.spec_from_template(
            user=request.user, template=template.pk, data={}
        )
        form = _form(request, initial=initial_from_spec(spec))
    return render(
        request,
        "jobs/new.html",
        {
            "form": form,
            "clone_of": clone_of,
            "template": template,
            "templates": template_selectors.templates_for_user(user=request.user),
        },
    )


def _template_source(request: HttpRequest) -> Any:
    value = request.GET.get("template")
    if not value or not (value.isascii() and value.isdigit()):
        return None
    try:
        return template_selectors.template_get_for_user(user=request.user, template_id=int(value))
    except ApplicationError:
        return None


def _clone_source(request: HttpRequest, value: str | None) -> Job | None:
    """The job a form was cloned from, if the user may see it (else the clone stands alone)."""
    if not value or not (value.isascii() and value.isdigit()):
        return None
    try:
        return job_get_for_user(user=request.user, job_id=int(value))
    except ApplicationError:
        return None


@login_required
def job_clone(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_get_for_user(user=request.user, job_id=job_id)
    if job.kind == Job.Kind.WORKSPACE:
        # A workspace is started again, not cloned: its home folder is already its state.
        return redirect("workspaces")
    form = _form(request, initial=initial_from_spec(job.spec))
    return render(request, "jobs/new.html", {"form": form, "clone_of": job})


@login_required
@require_POST
def job_preview_partial(request: HttpRequest) -> HttpResponse:
    """htmx partial: the exact manifests for the form as typed so far, or what is wrong."""
    form = _form(request, request.POST)
    context: dict[str, Any] = {}
    if form.is_valid():
        data = form.to_spec_data()
        if form.is_valid():
            try:
                preview = job_preview(user=request.user, data=data)
            except ApplicationError as exc:
                context["errors"] = exc.field_errors or {"spec": [exc.message]}
            else:
                context.update(
                    yaml=preview.yaml, defaults=preview.defaults, spec=preview.spec, fit=preview.fit
                )
    if not context:
        context["errors"] = {field: list(errs) for field, errs in form.errors.items()}
    return render(request, "jobs/_preview.html", context)


LOG_TAIL_LINES = 200


def _live_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    return {
        "job": job,
        "live": job_live_get(job=job),
        "can_cancel": not job.is_final and job_can_cancel(user=request.user, job=job),
    }


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_get_for_user(user=request.user, job_id=job_id)
    context = _live_context(request, job)
    context["manifest_yaml"] = to_yaml(job.manifests)
    context["spec_yaml"] = spec_yaml(job.spec)
    context["cluster_name"] = job_cluster_name(job)
    context["is_lead"] = membership_role(user=request.user, team=job.team) == Membership.Role.LEAD
    return render(request, "jobs/detail.html", context)


def job_button(
    request: HttpRequest,
    job_id: int,
    action: Callable[[Job, User], str],
    back: str | None = None,
) -> HttpResponse:
    """A button on a job's page (or a list): do it, say how it went (the service's words
    when it refuses), and go back: to the form's own ``next`` path, else ``back`` (a URL
    name), else the job's page. Another team's job is a 404, as everywhere."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    try:
        done = action(job, request.user)  # type: ignore[arg-type]
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done)
    following = request.POST.get("next") or ""
    if following and url_has_allowed_host_and_scheme(following, allowed_hosts={request.get_host()}):
        return redirect(following)
    return redirect(back) if back else redirect("jobs:detail", job_id=job.pk)


@login_required
@require_POST
def job_save_template(request: HttpRequest, job_id: int) -> HttpResponse:
    """ "Save as template": the job's spec (without its name) as the user's or a team's."""

    def save(job: Job, user: User) -> str:
        template = template_services.template_from_job(
            user=user,
            job=job,
            name=request.POST.get("name", ""),
            team=job.team.slug if request.POST.get("scope") == "team" else None,
        )
        return f"Saved as template {template.name} ({template.scope})."

    return job_button(request, job_id, save)


@login_required
@require_POST
def job_idle_exempt_view(request: HttpRequest, job_id: int) -> HttpResponse:
    def exempt(job: Job, user: User) -> str:
        job_idle_exempt(user=user, job_id=job.pk, reason=request.POST.get("reason", ""))
        return "Idle-GPU exemption saved."

    return job_button(request, job_id, exempt)


@login_required
@require_POST
def job_resume_view(request: HttpRequest, job_id: int) -> HttpResponse:
    def resume(job: Job, user: User) -> str:
        job_resume(user=user, job_id=job.pk)
        return f"Job {job.name} is scaling back up."

    return job_button(request, job_id, resume)


@login_required
def template_list(request: HttpRequest) -> HttpResponse:
    templates = list(template_selectors.templates_for_user(user=request.user))
    lead_of = {
        entry.team.pk
        for entry in team_roles_for_user(user=request.user)  # type: ignore[arg-type]
        if entry.role == Membership.Role.LEAD
    }
    rows = [
        {
            "template": t,
            "spec_yaml": spec_yaml(t.spec),
            "can_delete": t.owner_id == request.user.pk or t.team_id in lead_of,
        }
        for t in templates
    ]
    return render(request, "jobs/templates.html", {"rows": rows})


@login_required
@require_POST
def template_delete_view(request: HttpRequest, template_id: int) -> HttpResponse:
    try:
        template_services.template_delete(user=request.user, template_id=template_id)  # type: ignore[arg-type]
    except PermissionDenied as exc:
        # Only a refusal is said here: another team's template is "not found" (a 404), as
        # another team's job is.
        messages.error(request, exc.message)
    else:
        messages.success(request, "Template deleted.")
    return redirect("jobs:templates")


@login_required
def job_live_partial(request: HttpRequest, job_id: int) -> HttpResponse:
    """htmx partial: state, why pending, pods, timeline; polls itself until the job is final."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    return render(request, "jobs/_live.html", _live_context(request, job))


@login_required
def job_logs_partial(request: HttpRequest, job_id: int) -> HttpResponse:
    """htmx partial: the last lines of each pod's log (cluster trouble is shown, not raised)."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    logs = job_log_tail(job=job, tail=LOG_TAIL_LINES)
    return render(request, "jobs/_logs.html", {"job": job, "logs": logs, "tail": LOG_TAIL_LINES})


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    def cancel(job: Job, user: User) -> str:
        job_cancel(user=user, job_id=job.pk)
        return f"Job {job.name} cancelled."

    return job_button(request, job_id, cancel)


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    found = list(teams_for_user(user=request.user).select_related("cohort"))
    quotas = quota_usage_every_cluster(teams=found)
    clusters = {q.cluster for rows in quotas.values() for q in rows}
    teams = [
        {
            "team": team,
            "role": membership_role(user=request.user, team=team),
            "quotas": quotas[team.pk],
            "queued": queued_count(team=team),
        }
        for team in found
    ]
    return render(request, "portal/teams.html", {"teams": teams, "with_cluster": len(clusters) > 1})
