"""GPUs that fail like real hardware: an XID error injected into a running sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from conftest import REPO_ROOT, job_manifest, wait_for
from prometheus_client.parser import text_string_to_metric_families

from sandbox.controlplane.plane import DEFAULT_TOLERATION_SECONDS
from tests.sandbox_process import inject

A100 = "NVIDIA-A100-SXM4-80GB"


UNREACHABLE = "node.kubernetes.io/unreachable"


def scrape(sandbox: Any) -> dict[str, list[Any]]:
    with urllib.request.urlopen(sandbox.metrics_url, timeout=10) as resp:
        return {f.name: f.samples for f in text_string_to_metric_families(resp.read().decode())}


def held_gpu(sandbox: Any, namespace: str, prefix: str) -> tuple[str, str] | None:
    """(node, GPU index) of the device a pod of ``prefix`` holds, as the exporter says."""
    for sample in scrape(sandbox)["DCGM_FI_DEV_GPU_UTIL"]:
        labels = sample.labels
        if labels.get("namespace") == namespace and labels.get("pod", "").startswith(prefix):
            return labels["Hostname"], labels["gpu"]
    return None


def fault(sandbox: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandbox", "fault", "--kubeconfig", str(sandbox.kubeconfig), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=90,  # (the CLI is a Python start: slow on a loaded machine)
    )


def gpus(core: Any, node: str) -> tuple[str, str]:
    status = core.read_node(node).status
    return status.capacity["nvidia.com/gpu"], status.allocatable["nvidia.com/gpu"]


def start_training(batch: Any, core: Any, namespace: str, name: str) -> Any:
    """A one-A100 training job of two hours, once its pod runs."""
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            name, {"nvidia.com/gpu": 1}, product=A100,
            annotations={"sandbox.gpu-portal.dev/duration": "2h"},
        ),
    )  # fmt: skip
    return wait_for(
        lambda: next(
            (p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"),
            None,
        )
    )


def test_an_xid_fails_the_job_marks_the_gpu_unhealthy_and_shows_in_dcgm(
    sandbox: Any, batch: Any, core: Any, namespace: str
) -> None:
    # Given a training job running on one A100
    pod = start_training(batch, core, namespace, "trainer")
    held = wait_for(lambda: held_gpu(sandbox, namespace, "trainer"))
    assert held is not None
    node, gpu = held
    capacity, allocatable = gpus(core, node)

    # When its GPU falls off the bus
    done = fault(sandbox, "--node", node, "--gpu", gpu, "--xid", "79")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["xid"] == 79

    # Then its container fails as a CUDA program does (exit 1, CUDA's words in the log)...
    failed = wait_for(
        lambda: (
            (p := core.read_namespaced_pod(pod.metadata.name, namespace)).status.phase == "Failed"
            and p
        )
    )
    terminated = failed.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 1 and terminated.reason == "Error"
    log = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=5)
    assert "RuntimeError: CUDA error: unspecified launch failure" in log
    assert "Xid" not in log and "XID" not in log  # the XID is the driver's, not the program's
    # ...the device plugin takes the GPU out of allocatable, not out of capacity...
    assert gpus(core, node) == (capacity, str(int(allocatable) - 1))
    events = core.list_namespaced_event("default").items
    assert any(e.reason == "GPUUnhealthy" and f"GPU {gpu}" in e.message for e in events)
    # ...and dcgm-exporter reports the XID on that GPU, and only there.
    xids = {
        (s.labels["Hostname"], s.labels["gpu"]): s.value
        for s in scrape(sandbox)["DCGM_FI_DEV_XID_ERRORS"]
    }
    assert xids[(node, gpu)] == 79
    assert {k: v for k, v in xids.items() if k != (node, gpu)} == dict.fromkeys(
        [k for k in xids if k != (node, gpu)], 0.0
    )

    # A new pod on that node never gets the unhealthy GPU.
    after = job_manifest(
        "after", {"nvidia.com/gpu": 1}, product=A100,
        annotations={"sandbox.gpu-portal.dev/duration": "2h"},
    )  # fmt: skip
    after["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    batch.create_namespaced_job(namespace, after)
    assert wait_for(lambda: held_gpu(sandbox, namespace, "after")) != (node, gpu)

    # Repaired: allocatable again; the last XID stays, as it does until the driver reloads.
    assert fault(sandbox, "--node", node, "--gpu", gpu, "--repair").returncode == 0
    assert gpus(core, node) == (capacity, allocatable)
    assert {
        (s.labels["Hostname"], s.labels["gpu"]): s.value
        for s in scrape(sandbox)["DCGM_FI_DEV_XID_ERRORS"]
    }[(node, gpu)] == 79


@pytest.mark.parametrize(
    ("xid", "cuda_error", "ecc"),
    [
        (79, "RuntimeError: CUDA error: unspecified launch failure", False),
        (48, "RuntimeError: CUDA error: uncorrectable ECC error encountered", True),
        (94, "RuntimeError: CUDA error: uncorrectable ECC error encountered", True),
        (95, "RuntimeError: CUDA error: uncorrectable ECC error encountered", True),
        (74, "RuntimeError: NCCL error: unhandled cuda error", False),
    ],
)
def test_each_xid_kind_fails_the_pod_on_that_gpu_with_cuda_words_and_dcgm_series(
    sandbox: Any, batch: Any, core: Any, namespace: str, xid: int, cuda_error: str, ecc: bool
) -> None:
    # Given a training pod holding one A100
    name = f"xid-{xid}"
    pod = start_training(batch, core, namespace, name)
    node, gpu = wait_for(lambda: held_gpu(sandbox, namespace, name))

    def counter(metrics: dict[str, Any], name: str) -> float:
        return {(s.labels["Hostname"], s.labels["gpu"]): s.value for s in metrics[name]}[
            (node, gpu)
        ]

    before = scrape(sandbox)
    dbe_before = counter(before, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    rows_before = counter(before, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")
    # When its GPU reports this XID
    assert fault(sandbox, "--node", node, "--gpu", gpu, "--xid", str(xid)).returncode == 0
    try:
        # Then the pod fails with exit code 1 and its log ends in CUDA's words for it...
        failed = wait_for(
            lambda: (
                (p := core.read_namespaced_pod(pod.metadata.name, namespace)).status.phase
                == "Failed"
                and p
            )
        )
        assert failed.status.container_statuses[0].state.terminated.exit_code == 1
        log = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=5)
        assert cuda_error in log
        # ...and dcgm-exporter shows the XID on the GPU; the ECC and remapped-row counters
        # move for ECC kinds
        metrics = scrape(sandbox)
        labels = {
            (s.labels["Hostname"], s.labels["gpu"]): s.value
            for s in metrics["DCGM_FI_DEV_XID_ERRORS"]
        }
        assert labels[(node, gpu)] == xid
        assert counter(metrics, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") == dbe_before + (1 if ecc else 0)
        # (an A100 remaps a row for each uncorrectable error)
        rows = counter(metrics, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")
        assert rows == rows_before + (1 if ecc else 0)
    finally:
        fault(sandbox, "--node", node, "--gpu", gpu, "--repair")
        batch.delete_namespaced_job(name, namespace, propagation_policy="Background")


def test_an_ecc_error_moves_the_ecc_counter_and_bad_requests_name_the_field(
    sandbox: Any, core: Any
) -> None:
    node = next(
        n.metadata.name
        for n in core.list_node().items
        if int(n.status.capacity.get("nvidia.com/gpu", "0")) > 0
    )

    def dbe() -> float:
        return {
            (s.labels["Hostname"], s.labels["gpu"]): s.value
            for s in scrape(sandbox)["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
        }[(node, "0")]

    before = dbe()  # (a counter: earlier tests may have moved it)
    assert fault(sandbox, "--node", node, "--gpu", "0", "--xid", "48").returncode == 0
    assert dbe() == before + 1
    assert fault(sandbox, "--node", node, "--gpu", "0", "--repair").returncode == 0

    unknown = fault(sandbox, "--node", "no-such-node", "--gpu", "0", "--xid", "79")
    assert unknown.returncode == 1 and "node: no node named 'no-such-node'" in unknown.stderr
    try:
        inject(sandbox, node=node, gpu=0, xid=13)
        raise AssertionError("an unknown XID was accepted")
    except urllib.error.HTTPError as exc:
        assert exc.code == 400 and "xid: one of 48" in exc.read().decode()


def test_a_node_that_stops_is_marked_unknown_tainted_and_its_pods_evicted(
    sandbox: Any, batch: Any, core: Any, namespace: str
) -> None:
    # Given a running pod on a GPU node
    pod = start_training(batch, core, namespace, "stranded")
    node = pod.spec.node_name

    def ready(name: str) -> Any:
        return next(c for c in core.read_node(name).status.conditions if c.type == "Ready")

    # When its kubelet stops (no more Lease renewals)
    assert fault(sandbox, "--node", node, "--down").returncode == 0

    # Then after the grace period the node is Unknown and tainted unreachable...
    wait_for(lambda: ready(node).status == "Unknown", timeout=20)
    assert ready(node).reason == "NodeStatusUnknown"
    assert ready(node).message == "Kubelet stopped posting node status."
    tainted = {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    # (the node-lifecycle controller adds the two taints in two passes)
    wait_for(
        lambda: tainted <= {(t.key, t.effect) for t in core.read_node(node).spec.taints or []},
        timeout=10,
    )
    # ...its exporter is gone with it...
    assert not any(
        s.labels.get("Hostname") == node for s in scrape(sandbox)["DCGM_FI_DEV_GPU_UTIL"]
    )
    # ...and once the pod's toleration has passed, the taint manager evicts it: it stays
    # Terminating (nobody on the node confirms it)
    evicted = wait_for(
        lambda: (
            (
                p := core.read_namespaced_pod(pod.metadata.name, namespace)
            ).metadata.deletion_timestamp
            and p
        ),
        timeout=30,
    )
    target = next(c for c in evicted.status.conditions if c.type == "DisruptionTarget")
    assert target.reason == "DeletionByTaintManager"
    # (after the pod's tolerationSeconds, the API server's default as the local cluster sets
    # it, counted from the NoExecute taint's timeAdded, in the wall-clock seconds the real
    # controllers count in)
    (tolerated,) = [t.toleration_seconds for t in evicted.spec.tolerations if t.key == UNREACHABLE]
    added = next(
        t.time_added
        for t in core.read_node(node).spec.taints
        if t.key == UNREACHABLE and t.effect == "NoExecute"
    )
    waited = (target.last_transition_time - added).total_seconds()
    assert tolerated == DEFAULT_TOLERATION_SECONDS and abs(waited - tolerated) <= 2, waited
    events = core.list_namespaced_event(namespace).items
    assert any(e.reason == "TaintManagerEviction" for e in events)

    # When it comes back: Ready, untainted, and the evicted pod finishes terminating
    assert fault(sandbox, "--node", node, "--up").returncode == 0
    wait_for(lambda: ready(node).status == "True", timeout=20)
    # (the node-lifecycle controller lifts the taints at its next pass over the nodes, up to
    # its node-monitor period after the node says Ready)
    wait_for(
        lambda: (
            not any(
                t.key == "node.kubernetes.io/unreachable"
                for t in core.read_node(node).spec.taints or []
            )
        ),
        timeout=10,
    )
    wait_for(
        lambda: (
            pod.metadata.name
            not in [p.metadata.name for p in core.list_namespaced_pod(namespace).items]
        ),
        timeout=30,
    )
