"""Reads about workspaces: who may open or manage one, where a running workspace's server
answers (its ready pod's address, as the proxy reaches it) and what its user is doing (its
server's activity API)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from django.contrib.auth.models import AnonymousUser, User

from cluster import kube
from cluster.labels import JOB_ID_LABEL
from jobs.cluster_scope import in_job_cluster
from jobs.manifests.workspace import CODE_SERVER, flavor_of
from jobs.models import Job, JobState
from jobs.selectors.workspace_access import WORKSPACE_PATH, workspace_token
from scheduling.k8s_time import parse_time
from teams.models import Membership


@dataclass(frozen=True)
class WorkspaceRights:
    """What a user may do with a workspace. Open (through the proxy): its owner; a lead of
    its team only where the team lets leads in (``Team.workspace_leads_may_open``); nobody
    else, platform admins included: a notebook holds its owner's code, data and
    credentials. Manage (stop, start, delete): its owner or a lead of its team."""

    open: bool
    manage: bool


NO_RIGHTS = WorkspaceRights(open=False, manage=False)


def workspace_rights(
    *, user: User | AnonymousUser, jobs: Iterable[Job]
) -> dict[int, WorkspaceRights]:
    """The user's rights on each of ``jobs`` (with their teams loaded), from one query of
    the user's roles in those teams."""
    jobs = list(jobs)
    if not user.is_authenticated:
        return {job.pk: NO_RIGHTS for job in jobs}
    teams = {job.team_id for job in jobs}
    mine = Membership.objects.filter(user=user, team_id__in=teams)
    roles = {team_id: str(role) for team_id, role in mine.values_list("team_id", "role")}
    return {job.pk: _rights(user, job, roles.get(job.team_id)) for job in jobs}


def _rights(user: User | AnonymousUser, job: Job, role: str | None) -> WorkspaceRights:
    """A platform admin manages every team's workspaces, as a lead (``membership_role``),
    but opens only where a lead of its own would."""
    if job.kind != Job.Kind.WORKSPACE:
        return NO_RIGHTS
    if job.owner_id == user.pk:
        return WorkspaceRights(open=True, manage=True)
    lead = role == Membership.Role.LEAD
    return WorkspaceRights(
        open=lead and job.team.workspace_leads_may_open,
        manage=lead or bool(getattr(user, "is_superuser", False)),
    )


def workspace_can_open(*, user: User | AnonymousUser, job: Job) -> bool:
    return workspace_rights(user=user, jobs=[job])[job.pk].open


def workspace_can_manage(*, user: User | AnonymousUser, job: Job) -> bool:
    return workspace_rights(user=user, jobs=[job])[job.pk].manage


@dataclass(frozen=True)
class Endpoint:
    """A workspace server's address: its pod's IP and container port, and the path the
    server is served under (``/workspaces/<id>/``)."""

    pod: str
    ip: str
    port: int
    started: datetime | None = None  # when its container (the server) started

    def url(self, path: str) -> str:
        return f"http://{self.ip}:{self.port}{path}"


def _ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


@in_job_cluster
def workspace_endpoint(*, job: Job) -> Endpoint | None:
    """The ready pod serving a running workspace (None: not running, or no pod is ready
    yet). Raises ``kube.ClusterError`` when the cluster cannot say."""
    if job.kind != Job.Kind.WORKSPACE or job.state != JobState.RUNNING:
        return None
    pods = kube.list_all("Pod", namespace=job.namespace, label_selector=f"{JOB_ID_LABEL}={job.pk}")
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or not _ready(pod) or (pod["metadata"].get("deletionTimestamp")):
            continue
        ports = pod["spec"]["containers"][0].get("ports") or []
        if ports:
            container = pod["spec"]["containers"][0]["name"]
            statuses = pod["status"].get("containerStatuses") or []
            status: dict = next((s for s in statuses if s.get("name") == container), {})
            running = (status.get("state") or {}).get("running") or {}
            return Endpoint(
                pod["metadata"]["name"],
                ip,
                int(ports[0]["containerPort"]),
                parse_time(running.get("startedAt") or ""),
            )
    return None


class ActivityUnavailable(Exception):
    """The workspace's server did not say what its user is doing (not ready, unreachable,
    refused, or an answer we cannot read): nothing may be decided from it."""


@dataclass(frozen=True)
class Activity:
    """What a workspace's server says its user did, read without counting as activity:
    Jupyter Server's ``/api/status`` and ``/api/kernels``; code-server's ``/healthz``."""

    last_activity: datetime  # the newest request, kernel message or terminal use it saw
    busy_kernels: int  # kernels executing now (a cell or a loop)
    kernels: int
    connections: int  # open kernel WebSockets (tabs)


ACTIVITY_TIMEOUT = httpx.Timeout(5.0)


def workspace_activity(*, job: Job, endpoint: Endpoint | None = None) -> Activity:
    """Ask the workspace's server. Raises ``ActivityUnavailable``."""
    if endpoint is None:
        try:
            endpoint = workspace_endpoint(job=job)
        except kube.ClusterError as exc:
            raise ActivityUnavailable(f"the cluster did not answer ({exc})") from exc
    if endpoint is None:
        raise ActivityUnavailable("no ready pod serves it")
    try:
        if flavor_of(job.manifests) == CODE_SERVER:
            return _code_server_activity(job, endpoint)
        return _jupyter_activity(job, endpoint)
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ActivityUnavailable(f"its server's activity API did not answer ({exc})") from exc


def _jupyter_activity(job: Job, endpoint: Endpoint) -> Activity:
    """``/api/status`` is not itself counted as activity, and ``/api/kernels`` is asked with
    ``no_track_activity``, so reading does not keep a workspace alive."""
    base = WORKSPACE_PATH.format(id=job.pk)
    headers = {"Authorization": f"token {workspace_token(job)}"}
    with httpx.Client(timeout=ACTIVITY_TIMEOUT, headers=headers) as client:
        status = client.get(endpoint.url(f"{base}api/status"))
        kernels = client.get(endpoint.url(f"{base}api/kernels?no_track_activity=1"))
    status.raise_for_status()
    kernels.raise_for_status()
    body, listed = status.json(), kernels.json()
    newest = parse_time(body["last_activity"])
    if newest is None:
        raise ValueError(f"last_activity {body['last_activity']!r}")
    for kernel in listed:
        seen = parse_time(kernel.get("last_activity") or "")
        if seen is not None and seen > newest:
            newest = seen
    return Activity(
        last_activity=newest,
        busy_kernels=sum(1 for k in listed if k.get("execution_state") == "busy"),
        kernels=len(listed),
        connections=int(body.get("connections") or 0),
    )


def _code_server_activity(job: Job, endpoint: Endpoint) -> Activity:
    """code-server's heartbeat (``/healthz``, which needs no password and does not beat):
    it beats on each request of its user, and once a minute while a connection is open
    (an open VS Code tab). Never beaten: nobody has used it since its server started."""
    with httpx.Client(timeout=ACTIVITY_TIMEOUT, headers={"Connection": "close"}) as client:
        health = client.get(endpoint.url("/healthz"))
    health.raise_for_status()
    beat = int(health.json()["lastHeartbeat"])
    if beat > 0:
        last = datetime.fromtimestamp(beat / 1000, tz=UTC)
    elif endpoint.started is not None:
        last = endpoint.started
    else:
        raise ValueError("no heartbeat yet, and its container's start time is unknown")
    return Activity(last_activity=last, busy_kernels=0, kernels=0, connections=0)
