"""Filling the local cluster for a benchmark, through its API server as any client would.

The benchmarks need thousands of objects in the cluster before they measure anything. They
are created here with the official client, many requests at once (the API server takes them
concurrently, as it takes a fleet of controllers' writes), and then the benchmark waits until
the real controllers, scheduler and simulated kubelets have settled them.

- ``create_all``: POST each manifest, in threads; an object already there counts as made.
- ``wait_pods_settled``: until every pod of the selector runs Ready or has finished.
- ``jump_node_clock``: move a stopped cluster's simulated clock on, so the simulated work
  of its pods ends as if that much time had passed (the API server's clock is the wall's).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# Where each kind the benchmarks create is posted: (API prefix, plural, namespaced).
PATHS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Job": ("/apis/batch/v1", "jobs", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "Service": ("/api/v1", "services", True),
    "ResourceFlavor": ("/apis/kueue.x-k8s.io/v1beta2", "resourceflavors", False),
    "ClusterQueue": ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
}
THREADS = 16


def kwok_completes_after(after: str) -> dict[str, str]:
    """Pod annotations for KWOK's pod-complete Stage: a Job's pod succeeds ``after`` (a Go
    duration) once it runs. Both are needed: the Stage's delay is at most its jitter, whose
    default (5 s) would otherwise cut a longer delay short."""
    stage = "pod-complete.stage.kwok.x-k8s.io"
    return {f"{stage}/delay": after, f"{stage}/jitter-delay": after}


def keep_running_on_kwok(manifest: dict[str, Any], after: str = "8760h") -> dict[str, Any]:
    """``manifest`` with its pods running ``after`` on KWOK's nodes before they succeed (a
    year: until deleted); the node simulation ignores the annotations and runs them as their
    own duration says."""
    template = manifest.get("spec", {}).get("template")
    if manifest["kind"] == "Job" and template is not None:
        annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
        annotations.update(kwok_completes_after(after))
    return manifest


def api_client(kubeconfig: Path, threads: int = THREADS) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = threads
    return client.ApiClient(configuration)


def create_all(
    kubeconfig: Path, objects: Iterable[tuple[str, dict[str, Any]]], *, threads: int = THREADS
) -> int:
    """POST every ``(namespace, manifest)``; returns how many were created (409s not)."""
    from kubernetes.client.rest import ApiException

    api = api_client(kubeconfig, threads)

    def create(item: tuple[str, dict[str, Any]]) -> int:
        namespace, manifest = item
        prefix, plural, namespaced = PATHS[manifest["kind"]]
        path = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
        for attempt in range(5):
            try:
                api.call_api(
                    path,
                    "POST",
                    body=manifest,
                    header_params={"Content-Type": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=60,
                )
                return 1
            except ApiException as exc:
                if exc.status == 409:
                    return 0
                # A 429 (the API server's max-in-flight) or a webhook not answering yet.
                if exc.status not in (429, 500, 503) or attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))
        return 0

    started, made = time.monotonic(), 0
    with ThreadPoolExecutor(threads) as pool:
        for index, done in enumerate(pool.map(create, objects), 1):
            made += done
            if index % 2000 == 0:
                rate = index / (time.monotonic() - started)
                print(f"     created {index:,} objects ({rate:.0f}/s)", flush=True)
    api.close()
    return made


def pod_phases(kubeconfig: Path, label_selector: str) -> dict[str, int]:
    """Pods of the selector by what they are doing: running (and ready), finished, other."""
    api = api_client(kubeconfig, 1)
    counts = {"pods": 0, "running": 0, "succeeded": 0, "failed": 0, "waiting": 0}
    token = ""
    while True:
        query: list[tuple[str, Any]] = [("labelSelector", label_selector), ("limit", 2000)]
        if token:
            query.append(("continue", token))
        response = api.call_api(
            "/api/v1/pods",
            "GET",
            query_params=query,
            auth_settings=["BearerToken"],
            response_type="object",
            _return_http_data_only=True,
            _request_timeout=120,
        )
        for pod in response.get("items") or []:
            counts["pods"] += 1
            phase = (pod.get("status") or {}).get("phase")
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if phase == "Running" and statuses and all(s.get("ready") for s in statuses):
                counts["running"] += 1
            elif phase == "Succeeded":
                counts["succeeded"] += 1
            elif phase == "Failed":
                counts["failed"] += 1
            else:
                counts["waiting"] += 1
        token = (response.get("metadata") or {}).get("continue") or ""
        if not token:
            break
    api.close()
    return counts


def wait_pods_settled(
    kubeconfig: Path,
    label_selector: str,
    expected: int,
    *,
    succeeded: int = 0,
    timeout: float = 3600,
) -> dict[str, int]:
    """Until ``expected`` pods of the selector exist, ``succeeded`` of them have, and none
    is still starting."""
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = pod_phases(kubeconfig, label_selector)
        done = counts["pods"] >= expected and counts["succeeded"] >= succeeded
        if done and not counts["waiting"]:
            return counts
        print(
            f"     pods: {counts['pods']:,}/{expected:,}, {counts['running']:,} running, "
            f"{counts['waiting']:,} starting",
            flush=True,
        )
        time.sleep(10)
    sys.exit(f"the cluster did not settle in {timeout:.0f} s: {counts}")


def jump_node_clock(state: Path, seconds: float) -> None:
    """Move a stopped local cluster's simulated clock ``seconds`` on (the nodes' state)."""
    from sandbox.store import Store

    store = Store(state / "nodes.sqlite3")
    try:
        clock = store.meta_get("clock")
        store.meta_set("clock", (float(clock) if clock is not None else time.time()) + seconds)
    finally:
        store.close()
