"""DaemonSet controller: one pod per node the template's ``nodeSelector`` matches.

A pod is created (bound to its node, as the DaemonSet controller binds them) on each
matching node that has none, and deleted from a node that stops matching (a GPU Operator
operand whose ``nvidia.com/gpu.deploy.*`` label is paused). The status counts desired,
current, ready and available pods, as ``kubectl get ds`` shows them.

Simplified: a node's taints are not checked against the pod's tolerations (the operands
tolerate ``nvidia.com/gpu``), there are no rolling updates (a template change applies to
new pods), and a pod that fails is not replaced (they run until deleted).
"""

from __future__ import annotations

from typing import Any

from sandbox.controllers.common import create_pod, delete_pod, is_ready, owned_by
from sandbox.state import Cluster
from sandbox.store import Obj

COMPONENT = "daemonset-controller"
# What the DaemonSet controller adds to every pod it makes (pkg/controller/daemon/util): a
# daemon stays on a node that is unreachable, not ready, under pressure or cordoned.
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def reconcile(cluster: Cluster) -> None:
    store = cluster.store
    settled = cluster.settled.setdefault("daemonsets", {})
    nodes_version = store.version("nodes")
    for ds in store.iter("daemonsets.apps"):
        meta = ds["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        signature = (
            meta.get("resourceVersion"),
            nodes_version,
            store.owned_stamp("pods", meta["uid"]),
        )
        if settled.get(meta["uid"]) == signature:
            continue
        before = repr(ds.get("status"))
        _sync(cluster, ds)
        if repr(ds.get("status")) != before:
            store.put("daemonsets.apps", ds)
        settled[meta["uid"]] = (
            ds["metadata"].get("resourceVersion"),
            store.version("nodes"),
            store.owned_stamp("pods", meta["uid"]),
        )


def _matches(node: Obj, selector: dict[str, str]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _sync(cluster: Cluster, ds: Obj) -> None:
    meta = ds["metadata"]
    template: dict[str, Any] = (ds.get("spec") or {}).get("template") or {}
    selector = (template.get("spec") or {}).get("nodeSelector") or {}
    wanted = {n["metadata"]["name"] for n in cluster.store.iter("nodes") if _matches(n, selector)}
    pods = [
        p
        for p in owned_by(cluster, "pods", meta["namespace"], meta["uid"])
        if not p["metadata"].get("deletionTimestamp")
    ]
    placed: dict[str, Obj] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName", "")
        if node not in wanted or node in placed:
            delete_pod(cluster, ds, pod, COMPONENT)
        else:
            placed[node] = pod
    for node in sorted(wanted - set(placed)):
        created, _ = create_pod(
            cluster,
            ds,
            template,
            f"{meta['name']}-",
            COMPONENT,
            spec_patch={
                "nodeName": node,
                "tolerations": [
                    *((template.get("spec") or {}).get("tolerations") or []),
                    *DAEMON_TOLERATIONS,
                ],
            },
        )
        if created is not None:
            placed[node] = created
    ready = sum(1 for p in placed.values() if is_ready(p))
    ds["status"] = {
        "currentNumberScheduled": len(placed),
        "desiredNumberScheduled": len(wanted),
        "numberMisscheduled": 0,
        "numberReady": ready,
        "numberAvailable": ready,
        **({"numberUnavailable": len(wanted) - ready} if len(wanted) > ready else {}),
        "updatedNumberScheduled": len(placed),
        "observedGeneration": meta.get("generation", 1),
    }
