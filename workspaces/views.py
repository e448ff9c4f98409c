"""The Workspaces page: a member's workspaces with Open, Stop, Start and Delete, and the
form that creates one (every rule is ``job_spec_check``'s, as for the API)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from cluster.selectors import catalog_get, cluster_choices
from core.errors import ApplicationError
from jobs.manifests.naming import home_claim_name
from jobs.models import LIVE_STATES, Job, WorkspaceImage
from jobs.selectors.jobs import job_get_for_user, jobs_for_user
from jobs.services.submit import job_submit
from jobs.views import job_button
from teams.selectors import teams_for_user
from workspaces.forms import WorkspaceForm
from workspaces.selectors import workspace_rights
from workspaces.services import (
    workspace_delete,
    workspace_start,
    workspace_stop,
    workspace_url,
)


def _form(request: HttpRequest, data: Any = None) -> WorkspaceForm:
    images = [(i.name, i.title) for i in WorkspaceImage.objects.filter(enabled=True)]
    return WorkspaceForm(
        data,
        teams=list(teams_for_user(user=request.user)),
        catalog=catalog_get(),
        images=images,
        clusters=cluster_choices(),
    )


@login_required
def workspace_list(request: HttpRequest) -> HttpResponse:
    form = _form(request, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        data = form.to_spec_data()
        if form.is_valid():
            try:
                job = job_submit(user=request.user, data=data)  # type: ignore[arg-type]
            except ApplicationError as exc:
                form.add_spec_errors(exc.field_errors, exc.message)
            else:
                messages.success(
                    request, f"Workspace {job.name} is starting: it opens once it runs."
                )
                return redirect("workspaces")
    found = (
        jobs_for_user(user=request.user, kind=Job.Kind.WORKSPACE)
        .filter(state__in=LIVE_STATES)
        .defer("manifests", "demand")
    )
    rights = workspace_rights(user=request.user, jobs=found)
    rows = [
        {
            "job": job,
            "url": workspace_url(job),
            "can_open": rights[job.pk].open,
            "can_manage": rights[job.pk].manage,
        }
        for job in found
    ]
    return render(request, "workspaces/list.html", {"rows": rows, "form": form})


@login_required
@require_POST
def workspace_stop_view(request: HttpRequest, job_id: int) -> HttpResponse:
    def stop(job: Job, user: User) -> str:
        workspace_stop(user=user, job_id=job.pk)
        return f"Workspace {job.name} is stopping; its home folder is kept."

    return job_button(request, job_id, stop, back="workspaces")


@login_required
@require_POST
def workspace_start_view(request: HttpRequest, job_id: int) -> HttpResponse:
    def start(job: Job, user: User) -> str:
        workspace_start(user=user, job_id=job.pk)
        return f"Workspace {job.name} is starting."

    return job_button(request, job_id, start, back="workspaces")


@login_required
@require_POST
def workspace_delete_view(request: HttpRequest, job_id: int) -> HttpResponse:
    def delete(job: Job, user: User) -> str:
        home = request.POST.get("delete_home") == "on"
        workspace_delete(user=user, job_id=job.pk, delete_home=home)
        kept = "its home folder too" if home else "its home folder is kept"
        return f"Workspace {job.name} is deleted; {kept}."

    return job_button(request, job_id, delete, back="workspaces")


@login_required
def workspace_panel(request: HttpRequest, job_id: int) -> HttpResponse:
    """The workspace's box on its job's page (the page is the jobs app's; this part is the
    workspaces app's, loaded into it): Open, Start, Stop for those who may, and the idle
    warning."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    if job.kind != Job.Kind.WORKSPACE:
        raise Http404("not a workspace")
    warning = job.events.filter(reason="WorkspaceIdle").order_by("-created_at").first()
    rights = workspace_rights(user=request.user, jobs=[job])[job.pk]
    workspace = {
        "url": workspace_url(job),
        "home_claim": home_claim_name(job.owner.username),
        "can_open": rights.open,
        "can_manage": rights.manage,
        "warning": warning.message if warning else "",
    }
    return render(request, "workspaces/_panel.html", {"job": job, "workspace": workspace})
