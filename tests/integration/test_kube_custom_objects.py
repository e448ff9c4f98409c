"""The Kubernetes adapter reaches Kueue's objects (custom resources) as it reaches the
built-in kinds, against a real API server with Kueue installed (the sandbox): create, read,
list, replace through ``ensure``, delete; a refusal of Kueue's schema is a refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster import kube
from tests.sandbox_process import SandboxProcess
from tests.worker_process import wait_for

LABELS = {"app.kubernetes.io/managed-by": "gpu-portal"}


def flavor(name: str, product: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": product}},
    }


def cluster_queue(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100-adapter",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                        }
                    ],
                }
            ],
        },
    }


def same_spec(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """The same quotas, whichever form a quantity takes (the API server may give back the
    integer it was sent as the string it canonicalised)."""

    def canonical(groups: Any) -> Any:
        return json.loads(json.dumps(groups), parse_int=str)

    return bool(
        canonical(existing["spec"]["resourceGroups"]) == canonical(wanted["spec"]["resourceGroups"])
    )


def test_kueues_objects_are_created_read_listed_replaced_and_deleted(
    cluster: SandboxProcess,
) -> None:
    # Given Kueue's objects written through the adapter
    kube.create(flavor("a100-adapter", "NVIDIA-A100-SXM4-80GB"))
    assert kube.ensure(cluster_queue("vision-adapter", 8), compare=same_spec) == "created"
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "vision", "namespace": "default", "labels": LABELS},
        "spec": {"clusterQueue": "vision-adapter"},
    }
    kube.create(local)
    try:
        # Then they read back with Kueue's defaults, and list by label in every namespace
        queue = kube.get("ClusterQueue", "vision-adapter")
        assert queue["spec"]["queueingStrategy"] == "BestEffortFIFO"
        assert kube.get("LocalQueue", "vision", "default")["spec"]["clusterQueue"] == (
            "vision-adapter"
        )
        listed = kube.list_all(
            "LocalQueue", label_selector="app.kubernetes.io/managed-by=gpu-portal"
        )
        # (the shared cluster may hold the teams' queues of other tests too)
        assert ("default", "vision") in {
            (q["metadata"]["namespace"], q["metadata"]["name"]) for q in listed
        }
        assert all(q["metadata"]["labels"].items() >= LABELS.items() for q in listed)
        # And a changed quota replaces the ClusterQueue; the same one changes nothing
        assert kube.ensure(cluster_queue("vision-adapter", 16), compare=same_spec) == "updated"
        assert kube.ensure(cluster_queue("vision-adapter", 16), compare=same_spec) == "unchanged"
        nominal = kube.get("ClusterQueue", "vision-adapter")["spec"]["resourceGroups"][0]
        # (a quantity: the API server may give it back as the string it canonicalised)
        assert str(nominal["flavors"][0]["resources"][0]["nominalQuota"]) == "16"
        # And what Kueue's schema refuses is refused, naming the field
        bad = cluster_queue("bad-adapter", 8)
        bad["spec"]["queueingStrategy"] = "FIFO"
        with pytest.raises(kube.PermanentClusterError, match=r"spec\.queueingStrategy"):
            kube.create(bad)
    finally:
        assert kube.delete("LocalQueue", "vision", "default")
        assert kube.delete("ClusterQueue", "vision-adapter")
        assert kube.delete("ResourceFlavor", "a100-adapter")
    # And a deleted object is gone once Kueue has let go of it (its finalizer), and
    # deleting it again says so
    wait_for(lambda: not exists("ClusterQueue", "vision-adapter"), timeout=30)
    assert kube.delete("ClusterQueue", "vision-adapter") is False


def exists(kind: str, name: str) -> bool:
    try:
        kube.get(kind, name)
    except kube.ObjectNotFound:
        return False
    return True
