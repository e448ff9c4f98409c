"""Pods of code-server images run a real code-server in the sandbox (driven with the official
client, as the portal will): on the pod's own loopback address and its container port,
ready once it answers, refusing everyone without the container's password (taken from a
Secret), serving VS Code to a session that has it, serving the home claim's folder, its
heartbeat moved by use and not by reading it, its output the pod's log."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from argon2 import PasswordHasher
from kubernetes import client

from sandbox.servers import Servers
from tests.sandbox.conftest import home_claim, wait_for

IMAGE = "docker.io/codercom/code-server:4.106.3"
PASSWORD = "portal-secret-" + uuid.uuid4().hex[:8]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


OPENER = urllib.request.build_opener(_NoRedirect)


def fetch(
    url: str, *, cookie: str = "", data: bytes | None = None
) -> tuple[int, dict[str, str], str]:
    """Status, headers and body, redirects not followed (0: nothing answers)."""
    request = urllib.request.Request(url, data=data)
    if cookie:
        request.add_header("Cookie", f"code-server-session={cookie}")
    try:
        with OPENER.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode(errors="replace")
    except (OSError, urllib.error.URLError):
        return 0, {}, ""


def code_server_pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "workspace",
                    "image": IMAGE,
                    "args": [
                        "--bind-addr",
                        "0.0.0.0:8080",
                        "--auth",
                        "password",
                        "--disable-telemetry",
                        "--disable-update-check",
                    ],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "env": [
                        {
                            "name": "PASSWORD",
                            "valueFrom": {"secretKeyRef": {"name": "cs-token", "key": "token"}},
                        }
                    ],
                    "resources": {"requests": {"cpu": "100m"}},
                    "volumeMounts": [{"name": "home", "mountPath": "/home/coder"}],
                }
            ],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


@pytest.fixture
def server(core: client.CoreV1Api, namespace: str) -> str:
    """A code-server pod, Ready; its URL."""
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "cs-token"},
            "data": {"token": base64.b64encode(PASSWORD.encode()).decode()},
        },
    )
    home_claim(core, namespace, f"home-{namespace}")
    core.create_namespaced_pod(namespace, code_server_pod("code", f"home-{namespace}"))

    def ready() -> Any:
        pod = core.read_namespaced_pod("code", namespace)
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        return conditions.get("Ready") == "True" and pod

    pod = wait_for(ready, timeout=60)
    return f"http://{pod.status.pod_ip}:8080"


def heartbeat(url: str) -> int:
    status, _, body = fetch(f"{url}/healthz")
    assert status == 200, body
    return int(json.loads(body)["lastHeartbeat"])


def test_a_code_server_pod_serves_vs_code_only_with_its_password(
    server: str, core: client.CoreV1Api, namespace: str
) -> None:
    ip = server.split("//")[1].split(":")[0]
    assert ip.startswith("127.") and not ip.startswith("127.0.0.")
    # Without the password: to the login page, and a wrong one is refused there
    status, headers, _ = fetch(f"{server}/")
    assert status == 302 and headers["Location"].endswith("login")
    wrong = urllib.parse.urlencode({"password": "guess"}).encode()
    assert "Incorrect password" in fetch(f"{server}/login", data=wrong)[2]
    assert fetch(f"{server}/", cookie="not-the-hash")[0] == 302
    # With a session the password opens (its argon2 hash, as code-server's own login
    # cookie is): VS Code's workbench, on the home claim's folder
    session = PasswordHasher().hash(PASSWORD)
    status, headers, _ = fetch(f"{server}/", cookie=session)
    folder = urllib.parse.parse_qs(urllib.parse.urlsplit(headers["Location"]).query)["folder"]
    assert status == 302 and folder[0].endswith(f"volumes/{namespace}/home-{namespace}")
    status, _, page = fetch(f"{server}/?folder={folder[0]}", cookie=session)
    assert status == 200 and "vscode-workbench-web-configuration" in page
    # Its log is the server's own output
    log = core.read_namespaced_pod_log("code", namespace, tail_lines=200)
    assert f"HTTP server listening on http://{ip}:8080" in log


def test_its_heartbeat_moves_with_use_and_not_with_reading_it(server: str) -> None:
    # Given a server nobody has used: no heartbeat, and asking for it adds none
    assert heartbeat(server) == 0
    assert heartbeat(server) == 0
    # When its user loads a page, Then it beats
    fetch(f"{server}/", cookie=PasswordHasher().hash(PASSWORD))
    assert wait_for(lambda: heartbeat(server) > 0, timeout=10)


def test_servers_get_absolute_home_folders_from_a_relative_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # make run keeps the sandbox's state in var/ (relative); a server runs in its home
    # folder, so a relative path would be taken from there and name a folder that is not
    monkeypatch.chdir(tmp_path)
    home = Servers(Path("var")).home_dir("team-vision", "home-alice", "uid-1")
    assert home == tmp_path / "var" / "volumes" / "team-vision" / "home-alice"
