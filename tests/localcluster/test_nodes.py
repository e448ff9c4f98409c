"""A simulated node fails as a real one does: its kubelet stops renewing its Lease, and the
real node-lifecycle controller does the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.localcluster.kube import (
    apply,
    condition,
    gpu_job,
    kubectl,
    namespace,
    node,
    pods,
    wait_for,
)
from tests.sandbox_process import SandboxProcess, inject


def test_a_node_whose_heartbeats_stop_is_marked_not_ready_and_its_pods_replaced(
    cluster: SandboxProcess,
) -> None:
    # Given an 8-GPU Job running on one of the two A100 nodes
    ns = namespace(cluster)
    apply(cluster, gpu_job("long", ns, 8, duration="3000s", backoff=6))
    first = wait_for(
        "the pod running",
        lambda: next((p for p in pods(cluster, ns) if p["status"].get("phase") == "Running"), None),
    )
    lost = first["spec"]["nodeName"]

    # When that node's kubelet stops (no more Lease renewals)
    inject(cluster, node=lost, down=True)
    try:
        # Then the node-lifecycle controller marks it not ready and taints it unreachable
        wait_for("the node Unknown", lambda: condition(node(cluster, lost), "Ready") == "Unknown")
        wait_for(
            "the unreachable taint",
            lambda: (
                "node.kubernetes.io/unreachable"
                in {t["key"] for t in node(cluster, lost)["spec"].get("taints") or []}
            ),
        )
        # and, its toleration over, evicts the pod; the Job runs a new one on the other node
        replacement = wait_for(
            "a replacement running elsewhere",
            lambda: next(
                (
                    p
                    for p in pods(cluster, ns)
                    if p["spec"].get("nodeName") not in (None, lost)
                    and p["status"].get("phase") == "Running"
                ),
                None,
            ),
            timeout=90,
        )
        assert replacement["metadata"]["name"] != first["metadata"]["name"]
        evicted = next(
            p for p in pods(cluster, ns) if p["metadata"]["uid"] == first["metadata"]["uid"]
        )
        assert evicted["metadata"].get("deletionTimestamp"), "the lost pod is terminating"
    finally:
        # When the node comes back
        inject(cluster, node=lost, down=False)
    # Then it reports Ready again and its kubelet finishes removing the evicted pod
    wait_for("the node Ready", lambda: condition(node(cluster, lost), "Ready") == "True")
    wait_for(
        "the evicted pod gone",
        lambda: first["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods(cluster, ns)},
    )


def test_a_claim_of_the_default_class_is_provisioned_bound_and_removed_with_it(
    cluster: SandboxProcess,
) -> None:
    # Given a claim that names no StorageClass
    ns = namespace(cluster)
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "home", "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )

    # When the real PV controller and the local provisioner have done their part
    def claim() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            kubectl(cluster, "get", "pvc", "home", "-n", ns, "-o", "json")
        )
        return found

    bound = wait_for(
        "the claim bound", lambda: claim() if claim()["status"].get("phase") == "Bound" else None
    )

    # Then it is bound to a volume of the default class, a folder on this machine
    assert bound["spec"]["storageClassName"] == "standard"
    volume = json.loads(kubectl(cluster, "get", "pv", bound["spec"]["volumeName"], "-o", "json"))
    folder = Path(volume["spec"]["hostPath"]["path"])
    assert folder.is_dir()
    # and deleting the claim deletes the volume and its files (reclaim policy Delete)
    (folder / "notes.txt").write_text("kept while the claim is")
    kubectl(cluster, "delete", "pvc", "home", "-n", ns, "--wait=false")
    wait_for(
        "the volume gone",
        lambda: bound["spec"]["volumeName"] not in kubectl(cluster, "get", "pv", "-o", "name"),
    )
    assert not folder.exists()
