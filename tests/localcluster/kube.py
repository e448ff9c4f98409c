"""Driving the local cluster as a platform engineer would: the real kubectl, YAML, waits."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import yaml

from tests.sandbox_process import REPO_ROOT, SandboxProcess

KUBECTL = str(REPO_ROOT / ".venv" / "bin" / "kubectl")
VERSIONS = dict(
    line.split("=", 1)
    for line in (REPO_ROOT / "localcluster" / "versions.env").read_text().splitlines()
    if line and not line.startswith("#")
)


def kubectl(
    cluster: SandboxProcess, *args: str, stdin: str | None = None, timeout: float = 60
) -> str:
    done = subprocess.run(
        [KUBECTL, f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def apply(cluster: SandboxProcess, *docs: dict[str, Any]) -> None:
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def wait_for(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def gpu_job(
    name: str,
    namespace: str,
    gpus: int,
    *,
    duration: str = "40s",
    backoff: int = 0,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "backoffLimit": backoff,
            "template": {
                "metadata": {"annotations": {"sandbox.gpu-portal.dev/duration": duration}},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {
                                "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


# A namespace a test made: deleted after the test (conftest.py), with all it holds.
TEST_NAMESPACE = "gpu-portal.dev/localcluster-test"


def namespace(cluster: SandboxProcess) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {TEST_NAMESPACE: "true"}},
        },
    )
    return name


def pods(cluster: SandboxProcess, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        kubectl(cluster, "get", "pods", "-n", ns, "-o", "json")
    )["items"]
    return items


def node(cluster: SandboxProcess, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl(cluster, "get", "node", name, "-o", "json"))
    return found


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None
