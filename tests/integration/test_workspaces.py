"""Workspaces end to end (docs/workspaces.md): a JupyterLab on a shared T4 slice, run by the
sandbox as a real Jupyter server on the pod's own loopback address; its home claim created on
first use and kept across stop and start; its server refusing every request without the
portal's secret; its quota held while it runs and freed while it is stopped.

Real processes: PostgreSQL, Redis, a Celery worker with beat, the sandbox (30× real time)
running jupyter-lab.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websocket
from django.contrib.auth.models import User
from django.test import Client

from cluster import kube
from cluster.labels import JOB_ID_LABEL
from jobs.models import Job, JobState
from jobs.selectors.workspace_access import workspace_token
from jobs.services.submit import job_submit
from teams.models import Team
from tests.conftest import workspace_spec
from tests.integration.test_reclaim import fresh
from tests.jupyter_client import run_cell
from tests.proxy_process import ProxyProcess
from tests.worker_process import wait_for
from workspaces.selectors import workspace_activity, workspace_endpoint
from workspaces.services import workspace_delete, workspace_start, workspace_stop

pytestmark = pytest.mark.django_db(transaction=True)


def server_url(job: Job) -> str:
    """The workspace pod's own address and port (as the portal's proxy reaches it)."""
    (pod,) = [
        p
        for p in kube.list_all(
            "Pod", namespace=job.namespace, label_selector=f"{JOB_ID_LABEL}={job.pk}"
        )
        if (p.get("status") or {}).get("phase") == "Running"
    ]
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    return f"http://{pod['status']['podIP']}:{port}/workspaces/{job.pk}/"


def http_status(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, None


def running(job: Job) -> Job:
    return wait_for(lambda: (j := fresh(job)).state == JobState.RUNNING and j, timeout=90)


def test_a_workspace_runs_jupyter_keeps_its_home_across_stop_and_start(
    users: dict[str, User],
) -> None:
    alice = users["alice"]
    # Given alice's workspace on a shared T4 slice
    job = job_submit(user=alice, data=workspace_spec())
    assert [m["kind"] for m in job.manifests] == ["Secret", "Deployment", "Service"]
    # When it runs, Then its home claim exists at the team's size, and its server answers
    # only with the portal's secret
    job = running(job)
    claim = kube.get("PersistentVolumeClaim", "home-alice", job.namespace)
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    url = server_url(job)
    assert http_status(url + "api/status")[0] == 403
    status, body = http_status(url + "api/status", workspace_token(job))
    assert status == 200 and "last_activity" in body
    # ...a file written in its home folder
    write = urllib.request.Request(
        url + "api/contents/notes.txt",
        data=json.dumps({"type": "file", "format": "text", "content": "kept"}).encode(),
        method="PUT",
        headers={"Authorization": f"token {workspace_token(job)}"},
    )
    with urllib.request.urlopen(write, timeout=10) as response:
        assert response.status in (200, 201)
    # When alice stops it, Then its pod goes, its quota is free, its run is kept for the
    # GPU-hour report, and the home claim stays
    workspace_stop(user=alice, job_id=job.pk)
    stopped = wait_for(lambda: (j := fresh(job)).state == JobState.STOPPED and j, timeout=60)
    assert not list(
        kube.list_all("Pod", namespace=job.namespace, label_selector=f"{JOB_ID_LABEL}={job.pk}")
    )
    assert stopped.admitted_at is None and len(stopped.earlier_runs) == 1
    assert kube.get("PersistentVolumeClaim", "home-alice", job.namespace)
    # When she starts it again, Then it runs with the same home folder
    workspace_start(user=alice, job_id=job.pk)
    job = running(job)
    url = server_url(job)
    status, body = http_status(url + "api/contents/notes.txt?content=1", workspace_token(job))
    assert status == 200 and body["content"] == "kept"
    # When she deletes it with its home folder, Then both are gone
    workspace_delete(user=alice, job_id=job.pk, delete_home=True)
    assert fresh(job).state == JobState.CANCELLED
    wait_for(
        lambda: not list(kube.list_all("PersistentVolumeClaim", namespace=job.namespace)),
        timeout=20,
    )


# --- opened through the portal, by no one else ------------------------------------------


@pytest.fixture
def proxy(worker_env: dict[str, str], live_server: Any, tmp_path: Path) -> Iterator[ProxyProcess]:
    proc = ProxyProcess(tmp_path / "proxy", worker_env, upstream=live_server.url).start()
    yield proc
    proc.stop()


def session_cookie(user: User | None) -> dict[str, str]:
    """The headers of a browser signed in to the portal as ``user`` (None: anonymous)."""
    if user is None:
        return {}
    client = Client()
    client.force_login(user)
    return {"Cookie": f"sessionid={client.cookies['sessionid'].value}"}


def get(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def handshake(url: str, headers: dict[str, str]) -> int:
    """The status a WebSocket handshake gets (101: upgraded)."""
    try:
        ws = websocket.create_connection(
            url.replace("http", "ws", 1),
            header=[f"{k}: {v}" for k, v in headers.items() if k != "Origin"],
            origin=headers.get("Origin"),
            timeout=10,
        )
    except websocket.WebSocketBadStatusException as exc:
        return int(exc.status_code)
    ws.close()
    return 101


def test_only_the_owner_opens_a_workspace_through_the_proxy(
    users: dict[str, User], proxy: ProxyProcess
) -> None:
    # Given alice's running workspace, and the portal behind the proxy
    job = running(job_submit(user=users["alice"], data=workspace_spec()))
    base = f"{proxy.url}/workspaces/{job.pk}"
    alice = {**session_cookie(users["alice"]), "Origin": proxy.url}
    wait_for(lambda: get(f"{base}/api/status", alice) == 200, timeout=30)
    # When alice opens it, Then JupyterLab answers through the portal, and a cell runs over
    # the proxied kernel WebSocket
    assert get(f"{base}/lab", alice) == 200
    assert run_cell(base, "1 + 1", alice) == "2"
    # ...and the portal's own pages are served through the same proxy
    assert get(f"{proxy.url}/jobs/{job.pk}/", alice) == 200
    # When anyone else asks, Then it is 404, over HTTP and on the WebSocket route alike:
    # carol and dave (other teams), bob (vision's lead: leads are not let in by default),
    # and an anonymous client
    kernels = f"{base}/api/kernels/00000000-0000-0000-0000-000000000000/channels"
    for who in ("carol", "dave", "bob", None):
        headers = {**session_cookie(users[who] if who else None), "Origin": proxy.url}
        assert get(f"{base}/lab", headers) == 404, who
        assert get(f"{base}/api/status", headers) == 404, who
        assert handshake(kernels, headers) == 404, who
    # ...and a page of another site cannot drive alice's notebook with her cookie
    evil = {**alice, "Origin": "http://evil.example"}
    assert handshake(kernels, evil) == 403
    request = urllib.request.Request(f"{base}/api/kernels", data=b"{}", method="POST", headers=evil)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    # ...and the proxy's log shows the refusals as what they are, not as its own errors
    assert "ERROR" not in proxy.tail(20000), proxy.tail(20000)
    # When vision lets its leads in, Then bob opens it too, and a platform admin still not
    Team.objects.filter(slug="vision").update(workspace_leads_may_open=True)
    bob = {**session_cookie(users["bob"]), "Origin": proxy.url}
    assert get(f"{base}/api/status", bob) == 200
    admin = {**session_cookie(users["admin"]), "Origin": proxy.url}
    assert get(f"{base}/api/status", admin) == 404
    # ...and a direct request to the pod, without the portal's secret, is refused
    assert http_status(server_url(job) + "api/status")[0] == 403


def page(url: str, headers: dict[str, str]) -> tuple[int, str]:
    """Status and text of a page, redirects followed."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_a_code_server_workspace_opens_through_the_proxy_and_its_heartbeat_is_its_activity(
    users: dict[str, User], proxy: ProxyProcess
) -> None:
    # Given alice's code-server workspace, run by the sandbox as a real code-server
    spec = workspace_spec(name="code", workspace_image="code-server")
    job = running(job_submit(user=users["alice"], data=spec))
    base = f"{proxy.url}/workspaces/{job.pk}"
    alice = {**session_cookie(users["alice"]), "Origin": proxy.url}
    wait_for(lambda: workspace_endpoint(job=fresh(job)), timeout=30)
    # ...which nobody has used: its activity is its server's start
    unused = workspace_activity(job=fresh(job))
    # When alice opens it, Then VS Code answers through the portal: the proxy signed her
    # in (no code-server login page), and VS Code's WebSocket is passed through
    status, text = page(f"{base}/", alice)
    assert status == 200 and "vscode-workbench-web-configuration" in text, text[:300]
    socket = f"{base}/?reconnectionToken={job.pk}-test&reconnection=false&skipWebSocketFrames=false"
    assert handshake(socket, alice) == 101
    # ...and code-server's port proxy takes a port, never a host to send her session to
    assert page(f"{base}/proxy/x@127.0.0.1:9/", alice)[0] == 404
    assert page(f"{base}/absproxy/127.0.0.1%3A9/", alice)[0] == 404
    assert handshake(f"{base}/proxy/x@127.0.0.1:9/", alice) == 404
    assert page(f"{base}/proxy/9/", alice)[0] != 404  # code-server's answer: nothing there
    # ...and what she did is its activity, read from code-server's heartbeat
    used = workspace_activity(job=fresh(job))
    assert used.last_activity > unused.last_activity
    # When anyone else asks, Then it is 404, over HTTP and on the WebSocket route alike
    for who in ("carol", "bob", None):
        headers = {**session_cookie(users[who] if who else None), "Origin": proxy.url}
        assert page(f"{base}/", headers)[0] == 404, who
        assert handshake(socket, headers) == 404, who
    # ...a code-server session cookie the browser sends is replaced by the proxy's own
    stale = {**alice, "Cookie": alice["Cookie"] + "; code-server-session=stale"}
    assert "vscode-workbench-web-configuration" in page(f"{base}/", stale)[1]
    # ...and the pod, asked directly without the portal's secret, sends to its login page
    pod = server_url(job).split("/workspaces/")[0]
    status, text = page(f"{pod}/", {})
    assert status == 200 and "password" in text.lower() and "vscode-workbench" not in text
