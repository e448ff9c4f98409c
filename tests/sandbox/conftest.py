"""Fixtures: the local cluster (real control plane, simulated GPU nodes), official clients."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # tests/ is not a package; make tests.sandbox_process importable
    sys.path.insert(0, str(REPO_ROOT))

from tests.sandbox_process import SandboxProcess  # noqa: E402

# The local cluster's speed (tests/conftest.py::local_cluster): a "30s" job takes a real second.
SPEED = 30.0
T = TypeVar("T")


@pytest.fixture(scope="session")
def sandbox(local_cluster: SandboxProcess) -> SandboxProcess:
    """The test process's local cluster (``tests/conftest.py::local_cluster``), shared with
    the portal's modules: each test works in a namespace of its own and repairs the faults it
    injects."""
    return local_cluster


def make_client(proc: SandboxProcess) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(proc.kubeconfig))


@pytest.fixture(scope="session")
def api_client(sandbox: SandboxProcess) -> client.ApiClient:
    return make_client(sandbox)


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch(api_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api_client)


@pytest.fixture(scope="session")
def apps(api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


@pytest.fixture(scope="session")
def sched(api_client: client.ApiClient) -> client.SchedulingV1Api:
    return client.SchedulingV1Api(api_client)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    # Kueue's pod webhook looks namespaces up in its informer's cache, which sees a new one
    # a moment later ("Namespace ... not found"): ready once a dry-run pod passes it.
    probe = pod_manifest("probe", {}, tolerate=False)

    def admitted() -> bool:
        try:
            core.create_namespaced_pod(name, probe, dry_run="All")
            return True
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            return False

    wait_for(admitted, timeout=20)
    yield name
    core.delete_namespace(name)


def wait_for(fn: Callable[[], T | None], timeout: float = 20.0, interval: float = 0.1) -> T:
    """Poll ``fn`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting; last value: {last!r}")


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_container(resources: dict[str, Any], name: str = "main", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"limits": resources},
        **extra,
    }


def job_manifest(
    name: str,
    resources: dict[str, Any],
    *,
    annotations: dict[str, str] | None = None,
    product: str | None = None,
    tolerate: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [gpu_container(resources)]}
    if tolerate:
        pod_spec["tolerations"] = [GPU_TOLERATION]
    if product:
        pod_spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": {"metadata": {"annotations": annotations or {}}, "spec": pod_spec},
        },
    }


def pod_manifest(
    name: str,
    resources: dict[str, Any],
    *,
    tolerate: bool = True,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [gpu_container(resources)],
        **spec,
    }
    if tolerate:
        pod_spec.setdefault("tolerations", [GPU_TOLERATION])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": pod_spec,
    }


def home_claim(core: client.CoreV1Api, ns: str, name: str) -> None:
    """A 10Gi home claim of the default StorageClass, as the portal makes for a workspace."""
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": name}, "spec": spec})


def events_for(core: client.CoreV1Api, ns: str, name: str, reason: str | None = None) -> list[Any]:
    selector = f"involvedObject.name={name}"
    if reason:
        selector += f",reason={reason}"
    return core.list_namespaced_event(ns, field_selector=selector).items


KUBECTL = Path(sys.executable).parent / "kubectl"


@pytest.fixture(scope="module")
def kubectl(sandbox: SandboxProcess):  # type: ignore[no-untyped-def]
    assert KUBECTL.exists(), "make test installs kubectl (scripts/install_kube_tools.py)"

    def run(*args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(KUBECTL), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)},
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result.stdout + result.stderr

    return run


def rows(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]
