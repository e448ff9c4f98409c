"""The local cluster survives its own crash and its own stop: SIGKILL (or SIGTERM) the
process that started it, start it again on the same ``--state``, and the cluster carries on
where it was: Jobs, Workloads, pods, and a workspace's server with its home folder. One
cluster for the module, restarted by each test (a start is the costly part)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.localcluster.kube import (
    apply,
    condition,
    gpu_job,
    kubectl,
    namespace,
    pods,
    wait_for,
)
from tests.localcluster.test_control_plane import gpu_queue
from tests.sandbox.conftest import make_client
from tests.sandbox.test_jupyter import TOKEN, get, running_server, write_note
from tests.sandbox_process import SandboxProcess, start_sandbox


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    proc = start_sandbox(tmp_path_factory.mktemp("restart"), profile="small", speed=10)
    yield proc
    proc.stop(timeout=30)


def notebook_with_a_note(cluster: SandboxProcess, ns: str) -> str:
    """A workspace's JupyterLab pod in ``ns`` (its token from a Secret, its home a claim),
    with ``notes.txt`` written into its home; its base URL."""
    core = client.CoreV1Api(make_client(cluster))
    token = base64.b64encode(TOKEN.encode()).decode()
    core.create_namespaced_secret(ns, {"metadata": {"name": "ws-7"}, "data": {"token": token}})
    base = running_server(core, ns, "nb", "home-keep")
    write_note(base)
    return base


def serves_the_note_again(base: str) -> None:
    """The server runs again, on the same address, with the note in its home."""
    _, body = wait_for(
        "the workspace's server with its files",
        lambda: (r := get(f"{base}/api/contents/notes.txt?content=1", TOKEN))[0] == 200 and r,
        timeout=180,  # (a restart of the whole local cluster, on a loaded machine)
    )
    assert body["content"] == "kept"


def survivor_running(cluster: SandboxProcess, ns: str) -> dict[str, Any]:
    """A Job of 8 GPUs in Kueue's queue, admitted and its pod running. Made last, just
    before the kill: its 75 s of real time must outlast the kill and the restart, not also
    the workspace's start on a loaded machine."""
    apply(
        cluster,
        gpu_job("survivor", ns, 8, duration="750s", labels={"kueue.x-k8s.io/queue-name": "team"}),
    )
    found: dict[str, Any] = wait_for(
        "the pod running",
        lambda: next(
            (
                p
                for p in pods(cluster, ns)
                if p["status"].get("phase") == "Running" and p["metadata"]["name"] != "nb"
            ),
            None,
        ),
    )
    return found


def test_after_sigkill_and_a_restart_jobs_workloads_and_pods_carry_on(
    own_cluster: SandboxProcess,
) -> None:
    cluster = own_cluster
    # Given a queued Job admitted by Kueue and running, and a workspace's server with a file
    # in its home
    ns = namespace(cluster)
    queue = f"cq-{ns}"
    gpu_queue(cluster, ns, queue, gpus=8)
    notebook = notebook_with_a_note(cluster, ns)
    running = survivor_running(cluster, ns)

    # When the process that started the cluster is killed outright, and started again
    killed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    cluster.kill()
    cluster.start(reset=False)

    # Then the Job, its admitted Workload and the same pod are all still there
    workloads = json.loads(kubectl(cluster, "get", "workloads", "-n", ns, "-o", "json"))["items"]
    assert len(workloads) == 1 and condition(workloads[0], "Admitted") == "True"
    now = {p["metadata"]["name"]: p for p in pods(cluster, ns)}
    job_pod = now[running["metadata"]["name"]]
    assert job_pod["metadata"]["uid"] == running["metadata"]["uid"]
    assert job_pod["status"]["phase"] == "Running"
    # and the workspace's server (killed with the nodes) runs again with its home folder
    serves_the_note_again(notebook)
    # and the run goes on to its end, the Workload finished
    wait_for(
        "the Job complete",
        lambda: (
            "Complete"
            in kubectl(
                cluster,
                "get",
                "job",
                "survivor",
                "-n",
                ns,
                "-o",
                "jsonpath={.status.conditions[*].type}",
            )
        ),
        timeout=180,  # (the restarted cluster catches up on a loaded machine)
    )
    wait_for(
        "the Workload finished",
        lambda: (
            condition(
                json.loads(kubectl(cluster, "get", "workloads", "-n", ns, "-o", "json"))["items"][
                    0
                ],
                "Finished",
            )
            == "True"
        ),
    )
    # and no node was taken for dead while the cluster came back: the nodes renewed their
    # Leases before the node-lifecycle controller started watching them, so it neither
    # marked them NotReady nor evicted the pod
    events = json.loads(
        kubectl(cluster, "get", "events", "-A", "--field-selector", "involvedObject.kind=Node",
                "-o", "json")
    )["items"]  # fmt: skip
    not_ready = [
        f"{e['involvedObject']['name']} {e['reason']} {e.get('lastTimestamp') or e['eventTime']}"
        for e in events
        if e["reason"] == "NodeNotReady"
        and dt.datetime.fromisoformat(e.get("lastTimestamp") or e["eventTime"]) >= killed_at
    ]
    assert not not_ready, not_ready


def test_after_a_stop_and_a_start_a_workspaces_server_runs_again_with_its_files(
    own_cluster: SandboxProcess,
) -> None:
    # Given a workspace's server with a file in its home
    notebook = notebook_with_a_note(own_cluster, namespace(own_cluster))
    # When the local cluster is stopped (SIGTERM: its servers stop with it) and started again
    own_cluster.restart(hard=False)
    # Then the pod's server runs again, on the same address, with its files
    serves_the_note_again(notebook)
