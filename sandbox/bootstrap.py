"""First start: the namespaces, PriorityClasses and nodes a fresh cluster has."""

from __future__ import annotations

from typing import Any

from sandbox.api import objects
from sandbox.api.resources import BY_KEY
from sandbox.profiles import build_nodes
from sandbox.state import Cluster


def node_conditions(ts: str) -> list[dict[str, Any]]:
    """A healthy kubelet's node conditions (also what a node coming back reports)."""

    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": ctype,
            "status": status,
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
            "reason": reason,
            "message": message,
        }

    return [
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


def bootstrap(cluster: Cluster, profile: dict[str, Any]) -> None:
    """Create the cluster from ``profile`` unless the state file already holds one."""
    store = cluster.store
    with store.lock:
        if store.count("nodes"):
            return
        now = cluster.now()
        ts = cluster.stamp(now)
        store.meta_set("cluster_created", now)
        store.meta_set("profile", profile.get("name", ""))
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            objects.create(
                cluster, BY_KEY["namespaces"], "", {"metadata": {"name": ns}}, check_schema=False
            )
        for name, value in (
            ("system-cluster-critical", 2000000000),
            ("system-node-critical", 2000001000),
        ):
            objects.create(
                cluster,
                BY_KEY["priorityclasses.scheduling.k8s.io"],
                "",
                {
                    "metadata": {"name": name},
                    "value": value,
                    "description": "Used for system critical pods that must run in the cluster, "
                    "but can be moved to another node if necessary."
                    if name == "system-cluster-critical"
                    else "Used for system critical pods that must not be moved from their "
                    "current node.",
                },
                check_schema=False,
            )
        for spec in build_nodes(profile, cluster.options.seed, ts):
            node = spec.node
            node["metadata"]["uid"] = cluster.new_uid()
            node["status"]["conditions"] = node_conditions(ts)
            store.put("nodes", node)
            store.meta_set(
                f"devices/{node['metadata']['name']}", [d.to_json() for d in spec.devices]
            )
