"""Who may open which workspace, and where its server answers: the proxy's reads of the
database and the cluster (synchronous; the proxy runs them in a worker thread)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from types import SimpleNamespace

from argon2 import PasswordHasher
from django.conf import settings
from django.contrib import auth
from django.contrib.sessions.backends.base import SessionBase
from django.utils.module_loading import import_string

from cluster import kube
from jobs.manifests.workspace import CODE_SERVER, JUPYTER, flavor_of
from jobs.models import Job
from jobs.selectors.workspace_access import WORKSPACE_PATH, workspace_token
from teams.selectors import teams_for_user
from workspaces.selectors import Endpoint, workspace_can_open, workspace_endpoint

CODE_SERVER_COOKIE = "code-server-session"
# code-server's port proxy: /proxy/<port>/… and /absproxy/<port>/… (raw, still %-encoded).
CODE_SERVER_PORT_PROXY = re.compile(r"^/(?:abs)?proxy/(?P<port>[^/?]*)")


@dataclass(frozen=True)
class Target:
    """An open-able workspace, as the proxy needs it: the path the portal serves it under,
    its server's token and kind, and its endpoint (None: not running or not ready;
    ``problem`` says why in the owner's words)."""

    job_id: int
    base_path: str
    token: str
    endpoint: Endpoint | None
    problem: str = ""
    flavor: str = JUPYTER
    # The header that signs the proxy in (``credential_for``).
    credential: tuple[bytes, bytes] = (b"", b"")

    def upstream_path(self, path: str) -> str:
        """The path on the server: Jupyter is served under the portal's prefix (its
        ``base_url``), code-server at its root (its pages link relatively)."""
        if self.flavor == CODE_SERVER and path.startswith(self.base_path):
            return "/" + path[len(self.base_path) :]
        return path

    def refused(self, upstream_path: str) -> bool:
        """Paths the proxy does not pass on: code-server's port proxy with anything but a
        port where the port goes. Before 4.99.4 code-server took a host there too
        (CVE-2025-47269) and sent the request on, the proxy's session cookie with it; an
        image an admin pins to such a release stays safe behind the portal."""
        if self.flavor != CODE_SERVER:
            return False
        found = CODE_SERVER_PORT_PROXY.match(upstream_path)
        return found is not None and not re.fullmatch(r"\d{1,5}", found["port"])


def credential_for(flavor: str, token: str) -> tuple[bytes, bytes]:
    """The header that signs the proxy in: Jupyter's token in ``Authorization``;
    code-server's session cookie (added to the browser's own cookies). Worked out here, in
    the access thread: hashing is no work for the proxy's event loop."""
    if flavor == CODE_SERVER:
        return b"cookie", f"{CODE_SERVER_COOKIE}={code_server_session(token)}".encode()
    return b"authorization", f"token {token}".encode()


@functools.lru_cache(maxsize=1024)
def code_server_session(password: str) -> str:
    """code-server's session cookie for ``password``: an argon2 hash of it, which
    code-server verifies against its ``PASSWORD`` on each request, as it does the cookie its
    own login page sets. Cheap parameters (one pass over 8 MiB): the password is 64 random
    hex digits, not something a hash could help guess, and each request pays the check."""
    return PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(password)


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
    token, flavor = workspace_token(job), flavor_of(job.manifests)
    return Target(
        job.pk, base_path, token, endpoint, flavor=flavor, credential=credential_for(flavor, token)
    )


def _not_running(job: Job) -> str:
    if job.state == "running":
        return "Its server is starting; this page reloads until it answers."
    return f"The workspace is {job.state} ({job.reason or 'no reason given'}): {job.message}"
