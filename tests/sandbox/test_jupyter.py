"""Pods of Jupyter images run a real JupyterLab on the simulated nodes (driven with the
official client, as the portal will): on the pod's own loopback address and its container port,
ready once it answers, refusing requests without the container's token (taken from a
Secret), running a cell over its kernel WebSocket, its home folder a claim's that outlives
the pod, its output the pod's log, and gone with the pod."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from kubernetes import client

from tests import jupyter_client
from tests.sandbox.conftest import (
    GPU_TOLERATION,
    home_claim,
    rows,
    wait_for,
)
from tests.sandbox_process import SandboxProcess

IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-24"
TOKEN = "portal-secret-" + uuid.uuid4().hex[:8]


def notebook_pod(name: str, claim: str, gpu: bool = False) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "notebook",
                    "image": IMAGE,
                    "args": ["start-notebook.py", "--ServerApp.base_url=/workspaces/7/"],
                    "ports": [{"name": "http", "containerPort": 8888}],
                    "env": [
                        {
                            "name": "JUPYTER_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "ws-7", "key": "token"}},
                        }
                    ],
                    "resources": {"requests": {"cpu": "100m"}},
                    "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
                }
            ],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    if gpu:
        container = pod["spec"]["containers"][0]
        container["resources"]["limits"] = {"nvidia.com/gpu": "1"}
        pod["spec"]["tolerations"] = [GPU_TOLERATION]
    return pod


def get(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, urllib.error.URLError):
        return 0, None  # nothing listens there (now)


def running_server(
    core: client.CoreV1Api, ns: str, name: str, claim: str, gpu: bool = False
) -> str:
    """Create the pod (and its home claim, as the portal does, when there is none yet) and
    return its base URL once it is Ready."""
    with contextlib.suppress(client.ApiException):  # (409: there already)
        home_claim(core, ns, claim)
    core.create_namespaced_pod(ns, notebook_pod(name, claim, gpu))

    def ready() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        return conditions.get("Ready") == "True" and pod

    pod = wait_for(ready, timeout=60)
    return f"http://{pod.status.pod_ip}:8888/workspaces/7"


def write_note(base: str) -> None:
    """Write ``notes.txt`` ("kept") into the server's home through its contents API."""
    request = urllib.request.Request(
        f"{base}/api/contents/notes.txt",
        data=json.dumps({"type": "file", "format": "text", "content": "kept"}).encode(),
        method="PUT",
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 201)


def run_cell(base: str, code: str) -> str:
    return jupyter_client.run_cell(base, code, {"Authorization": f"token {TOKEN}"})


@pytest.fixture
def secret(core: client.CoreV1Api, namespace: str) -> str:
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "ws-7"},
            "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
        },
    )
    return namespace


def test_a_jupyter_pod_runs_a_real_jupyterlab_on_its_own_address(
    core: client.CoreV1Api, secret: str
) -> None:
    ns = secret
    base = running_server(core, ns, "ws-7", claim=f"home-{ns}")
    ip = base.split("//")[1].split(":")[0]
    assert ip.startswith("127.") and not ip.startswith("127.0.0.")
    # Without the token it refuses; with it, its status
    assert get(f"{base}/api/status")[0] == 403
    status, body = get(f"{base}/api/status", TOKEN)
    assert status == 200 and set(body) >= {"started", "last_activity", "kernels", "connections"}
    # A cell runs over the kernel's WebSocket
    assert run_cell(base, "1 + 1") == "2"
    # Its log is the server's own output
    log = core.read_namespaced_pod_log("ws-7", ns, tail_lines=200)
    assert "Jupyter Server" in log and "/workspaces/7/" in log


def test_the_home_folder_outlives_the_pod(core: client.CoreV1Api, secret: str) -> None:
    ns, claim = secret, f"home-{secret}"
    base = running_server(core, ns, "first", claim)
    # Given a file written into the home folder through Jupyter's contents API
    write_note(base)
    # When the pod goes (its server with it) and another starts on the same claim
    core.delete_namespaced_pod("first", ns, grace_period_seconds=0)
    wait_for(lambda: not _answers(base), timeout=30)
    again = running_server(core, ns, "second", claim)
    # Then the file is there
    status, body = get(f"{again}/api/contents/notes.txt?content=1", TOKEN)
    assert status == 200 and body["content"] == "kept"


def claims(core: client.CoreV1Api, ns: str) -> list[str]:
    return [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items]


def _answers(base: str) -> bool:
    try:
        urllib.request.urlopen(f"{base}/api", timeout=1)
    except (OSError, urllib.error.URLError):
        return False
    return True


def gpu_util(sandbox: SandboxProcess, pod: str) -> float | None:
    with urllib.request.urlopen(sandbox.metrics_url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'pod="{pod}"' in line:
                return float(line.rsplit(" ", 1)[1])
    return None


def test_the_notebooks_gpu_is_busy_only_while_a_kernel_executes(
    core: client.CoreV1Api, secret: str, sandbox: SandboxProcess
) -> None:
    # Given a notebook holding a GPU, with nothing running: its GPU idles
    base = running_server(core, secret, "gpu-nb", claim=f"gpu-{secret}", gpu=True)
    assert wait_for(lambda: (u := gpu_util(sandbox, "gpu-nb")) is not None and u < 5, timeout=20)
    # When a cell runs for a while, Then its GPU is busy until the cell ends
    done = threading.Thread(target=run_cell, args=(base, "import time; time.sleep(6)"))
    done.start()
    assert wait_for(lambda: (gpu_util(sandbox, "gpu-nb") or 0) > 80, timeout=10)
    done.join(timeout=30)
    assert wait_for(lambda: (gpu_util(sandbox, "gpu-nb") or 100) < 5, timeout=10)


def test_a_claim_is_bound_at_once_and_its_files_go_with_it(
    core: client.CoreV1Api, secret: str, kubectl: Any
) -> None:
    ns = secret
    # Given a home claim a platform's default StorageClass provisions
    home_claim(core, ns, "home-alice")
    wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim("home-alice", ns).status.phase == "Bound"
        ),
        timeout=20,
    )
    table = rows(kubectl("get", "pvc", "-n", ns))
    assert table[0][:6] == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS"]
    assert table[1][:2] == ["home-alice", "Bound"] and table[1][3:6] == ["10Gi", "RWO", "standard"]
    # ...with a file a notebook wrote
    base = running_server(core, ns, "nb", "home-alice")
    write_note(base)
    core.delete_namespaced_pod("nb", ns, grace_period_seconds=0)
    wait_for(lambda: not _answers(base), timeout=30)
    # When the claim is deleted and made again, Then the new volume is empty
    core.delete_namespaced_persistent_volume_claim("home-alice", ns)
    wait_for(lambda: "home-alice" not in claims(core, ns), timeout=30)
    home_claim(core, ns, "home-alice")
    again = running_server(core, ns, "nb2", "home-alice")
    assert get(f"{again}/api/contents/notes.txt", TOKEN)[0] == 404
