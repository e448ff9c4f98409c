"""The local cluster survives its own crash: SIGKILL the process that started it, start it
again on the same ``--state``, and the cluster carries on where it was."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest

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
from tests.sandbox_process import SandboxProcess, start_sandbox


@pytest.fixture
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    proc = start_sandbox(tmp_path_factory.mktemp("restart"), profile="small", speed=10)
    yield proc
    proc.stop(timeout=30)


def test_after_sigkill_and_a_restart_jobs_workloads_and_pods_carry_on(
    own_cluster: SandboxProcess,
) -> None:
    cluster = own_cluster
    # Given a queued Job admitted by Kueue and running
    ns = namespace(cluster)
    queue = f"cq-{ns}"
    gpu_queue(cluster, ns, queue, gpus=8)
    apply(
        cluster,
        gpu_job("survivor", ns, 8, duration="250s", labels={"kueue.x-k8s.io/queue-name": "team"}),
    )
    running = wait_for(
        "the pod running",
        lambda: next((p for p in pods(cluster, ns) if p["status"].get("phase") == "Running"), None),
    )

    # When the process that started the cluster is killed outright, and started again
    killed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    cluster.kill()
    cluster.start(reset=False)

    # Then the Job, its admitted Workload and the same pod are all still there
    workloads = json.loads(kubectl(cluster, "get", "workloads", "-n", ns, "-o", "json"))["items"]
    assert len(workloads) == 1 and condition(workloads[0], "Admitted") == "True"
    now = pods(cluster, ns)
    assert [p["metadata"]["uid"] for p in now] == [running["metadata"]["uid"]]
    assert now[0]["status"]["phase"] == "Running"
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
