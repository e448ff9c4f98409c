"""The local cluster's own smoke test: the real components, built from their Go modules, with
simulated GPU nodes (``python -m sandbox``), driven as a platform
engineer would drive it, with the real kubectl."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from tests.localcluster.kube import VERSIONS, apply, gpu_job, kubectl, namespace, wait_for
from tests.sandbox_process import SandboxProcess


def test_kubectl_version_shows_the_built_kubernetes(cluster: SandboxProcess) -> None:
    version = json.loads(kubectl(cluster, "version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == VERSIONS["KUBERNETES"]
    nodes = json.loads(kubectl(cluster, "get", "nodes", "-o", "json"))["items"]
    assert {n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes} == {VERSIONS["KUBERNETES"]}


@pytest.mark.parametrize(
    "path",
    [
        "/apis/kueue.x-k8s.io/v1beta2",
        "/apis/trainer.kubeflow.org/v1alpha1",
        "/apis/jobset.x-k8s.io/v1alpha2",
        "/apis/kubeflow.org/v1",
        "/apis/visibility.kueue.x-k8s.io/v1beta2",
        "/apis/nvidia.com/v1",
    ],
)
def test_the_operators_apis_are_served(cluster: SandboxProcess, path: str) -> None:
    served = json.loads(kubectl(cluster, "get", "--raw", path))
    assert served["kind"] == "APIResourceList"
    assert served["resources"], path


def test_trainers_torch_runtime_is_installed(cluster: SandboxProcess) -> None:
    runtimes = json.loads(kubectl(cluster, "get", "clustertrainingruntimes", "-o", "json"))
    assert "torch-distributed" in {r["metadata"]["name"] for r in runtimes["items"]}


def test_a_gpu_job_is_scheduled_onto_a_gpu_node_runs_and_its_log_follows(
    cluster: SandboxProcess,
) -> None:
    # Given a Job asking for 2 GPUs
    ns = namespace(cluster)
    apply(cluster, gpu_job("train", ns, 2))

    # When the real scheduler binds its pod
    def bound() -> dict[str, Any] | None:
        pods = json.loads(kubectl(cluster, "get", "pods", "-n", ns, "-o", "json"))["items"]
        return pods[0] if pods and pods[0]["spec"].get("nodeName") else None

    pod = wait_for("the pod bound", bound)
    node = json.loads(kubectl(cluster, "get", "node", pod["spec"]["nodeName"], "-o", "json"))

    # Then it is on a node with GPUs to give, and it runs with a loopback pod IP
    assert int(node["status"]["allocatable"].get("nvidia.com/gpu", "0")) >= 2
    name = pod["metadata"]["name"]
    wait_for(
        "the pod running",
        lambda: kubectl(cluster, "get", "pod", name, "-n", ns, "-o", "jsonpath={.status.podIP}"),
    )
    assert kubectl(
        cluster, "get", "pod", name, "-n", ns, "-o", "jsonpath={.status.podIP}"
    ).startswith("127.")
    # and `kubectl logs -f` follows it through the API server to the end of the run
    log = kubectl(cluster, "logs", "-f", name, "-n", ns, timeout=60)
    assert "GPU_PORTAL_PROGRESS" in log
    assert log.rstrip().endswith("final checkpoint /checkpoints/final.pt"), log[-500:]
    # and the Job controller sees it succeed
    wait_for(
        "the Job complete",
        lambda: (
            "Complete"
            in kubectl(
                cluster,
                "get",
                "job",
                "train",
                "-n",
                ns,
                "-o",
                "jsonpath={.status.conditions[*].type}",
            )
        ),
    )


def gpu_queue(cluster: SandboxProcess, ns: str, queue: str, gpus: int) -> None:
    """A ClusterQueue of ``gpus`` GPUs and LocalQueue ``team`` in ``ns`` pointing at it."""
    apply(
        cluster,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "default-flavor"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 16},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": ns},
            "spec": {"clusterQueue": queue},
        },
    )
    wait_for(
        "the ClusterQueue active",
        lambda: (
            "True"
            in kubectl(
                cluster,
                "get",
                "clusterqueue",
                queue,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Active')].status}",
            )
        ),
    )


def test_kueue_never_admits_two_8_gpu_workloads_into_8_gpus(cluster: SandboxProcess) -> None:
    # Given a ClusterQueue of 8 GPUs and two 8-GPU Jobs submitted at once
    ns = namespace(cluster)
    queue = f"cq-{ns}"
    gpu_queue(cluster, ns, queue, gpus=8)
    label = {"kueue.x-k8s.io/queue-name": "team"}
    # (an hour each: the first still runs while we look)
    apply(
        cluster,
        gpu_job("first", ns, 8, labels=label, duration="1h"),
        gpu_job("second", ns, 8, labels=label, duration="1h"),
    )

    # When Kueue has decided
    def workloads() -> list[dict[str, Any]]:
        items = json.loads(kubectl(cluster, "get", "workloads", "-n", ns, "-o", "json"))["items"]
        return items if len(items) == 2 else []

    wait_for("both Workloads", workloads)
    wait_for(
        "one admitted",
        lambda: any(_admitted(w) for w in workloads()),
    )
    # Then, for as long as we look, exactly one is admitted and the other waits, suspended
    for _ in range(10):
        admitted = [w for w in workloads() if _admitted(w)]
        assert len(admitted) == 1, [w["status"] for w in workloads()]
        time.sleep(0.3)
    suspended = kubectl(cluster, "get", "jobs", "-n", ns, "-o", "jsonpath={.items[*].spec.suspend}")
    assert sorted(suspended.split()) == ["false", "true"]
    # and the visibility API lists the waiting one
    pending = json.loads(
        kubectl(
            cluster,
            "get",
            "--raw",
            f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{queue}/pendingworkloads",
        )
    )
    assert len(pending["items"]) == 1


def _admitted(workload: dict[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller",
    "kube-scheduler",
    "kueue",
    "jobset",
    "trainer-control",
    "training-operat",
)


def test_every_component_listens_on_loopback_only(cluster: SandboxProcess) -> None:
    # Given the cluster running: every socket its components listen on
    listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True)
    sockets = [
        (line.split()[3], line.split()[-1])
        for line in listening.stdout.splitlines()
        if any(f'(("{name}' in line for name in COMPONENTS)
    ]
    # Then there are some, and each is on a loopback address
    assert {owner.split('"')[1] for _, owner in sockets} >= {"etcd", "kube-apiserver", "kueue"}
    outside = [(addr, owner) for addr, owner in sockets if not addr.startswith(("127.", "[::1]"))]
    assert not outside, outside
