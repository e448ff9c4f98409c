"""Who may open which workspace, and where its server answers: the proxy's reads of the
database and the cluster (synchronous; the proxy runs them in a worker thread)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from django.conf import settings
from django.contrib import auth
from django.contrib.sessions.backends.base import SessionBase
from django.utils.module_loading import import_string

from cluster import kube
from jobs.models import Job
from jobs.selectors.workspaces import Endpoint, workspace_endpoint
from jobs.services.workspaces import WORKSPACE_PATH, workspace_can_open, workspace_token
from teams.selectors import teams_for_user


@dataclass(frozen=True)
class Target:
    """An open-able workspace, as the proxy needs it: the path its server is served under,
    its server's token, and its endpoint (None: not running or not ready; ``problem`` says
    why in the owner's words)."""

    job_id: int
    base_path: str
    token: str
    endpoint: Endpoint | None
    problem: str = ""


def _session_store(session_key: str) -> SessionBase:
    engine = import_string(f"{settings.SESSION_ENGINE}.SessionStore")
    return engine(session_key=session_key)


def session_user_id(session_key: str | None) -> int | None:
    """The signed-in user of a portal session cookie (password or single sign-on), checked
    as Django checks it on every request (the session's password hash); None otherwise."""
    if not session_key:
        return None
    request = SimpleNamespace(session=_session_store(session_key))
    user = auth.get_user(request)  # type: ignore[arg-type]
    return user.pk if user.is_authenticated and user.is_active else None


def workspace_target(*, user_id: int, job_id: int) -> Target | None:
    """The workspace ``job_id`` if ``user_id`` may open it, else None (the proxy answers
    404, as for another team's job: not even its existence is told)."""
    job = (
        Job.objects.select_related("team", "owner")
        .filter(pk=job_id, kind=Job.Kind.WORKSPACE)
        .first()
    )
    if job is None:
        return None
    user = job.owner if job.owner_id == user_id else auth.get_user_model().objects.get(pk=user_id)
    if not teams_for_user(user=user).filter(pk=job.team_id).exists():
        return None
    if not workspace_can_open(user=user, job=job):
        return None
    base_path = WORKSPACE_PATH.format(id=job.pk)
    try:
        endpoint = workspace_endpoint(job=job)
    except kube.ClusterError as exc:
        return Target(job.pk, base_path, "", None, f"The cluster did not answer ({exc}).")
    if endpoint is None:
        return Target(job.pk, base_path, "", None, _not_running(job))
    return Target(job.pk, base_path, workspace_token(job), endpoint)


def _not_running(job: Job) -> str:
    if job.state == "running":
        return "Its server is starting; this page reloads until it answers."
    return f"The workspace is {job.state} ({job.reason or 'no reason given'}): {job.message}"
