"""The node lifecycle controller: a node whose kubelet stopped renewing its Lease.

As kube-controller-manager does (``node-monitor-grace-period``, 50 s since 1.32):

1. A node whose Lease was not renewed for the grace period gets its conditions set to
   ``Unknown`` (reason ``NodeStatusUnknown``, "Kubelet stopped posting node status."), the
   taints ``node.kubernetes.io/unreachable`` ``NoSchedule`` and ``NoExecute`` (with
   ``timeAdded``), a ``NodeNotReady`` event, and its pods' Ready condition ``False``.
2. Taint-based eviction: a pod on it is deleted once it has tolerated the ``NoExecute``
   taint for its ``tolerationSeconds`` (300 by the DefaultTolerationSeconds admission), with
   a ``DisruptionTarget`` condition (``DeletionByTaintManager``) and a
   ``TaintManagerEviction`` event. The kubelet cannot confirm it, so it stays Terminating.
3. When the Lease is renewed again: ``Ready`` ``True``, the taints removed.

Nodes go down through ``sandbox.faults`` (``{"node": N, "down": true}``).
"""

from __future__ import annotations

from typing import Any

from sandbox import faults
from sandbox.bootstrap import node_conditions
from sandbox.controllers.lease import NAMESPACE
from sandbox.state import Cluster
from sandbox.store import Obj

GRACE_SECONDS = 50.0
UNREACHABLE = "node.kubernetes.io/unreachable"
CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")


def _renewed(cluster: Cluster, node: str) -> float | None:
    lease = cluster.store.get("leases.coordination.k8s.io", NAMESPACE, node)
    stamp = ((lease or {}).get("spec") or {}).get("renewTime")
    return cluster.sim_time(stamp) if stamp else None


def _unreachable_taints(node: Obj) -> list[dict[str, Any]]:
    return [t for t in node["spec"].get("taints") or [] if t.get("key") == UNREACHABLE]


def reconcile(cluster: Cluster) -> None:
    now = cluster.now()
    for node in list(cluster.store.iter("nodes")):
        name = node["metadata"]["name"]
        # Only a node whose kubelet is down (a fault) goes stale: at 60× speed the grace
        # period is under a second of wall time, and a busy host's pause of the sandbox's
        # own loop must not look like a dead kubelet. Checked first: its Lease is read only
        # for such a node, not for every node at every pass.
        stale = False
        if faults.node_down(cluster, name):
            renewed = _renewed(cluster, name)
            stale = renewed is not None and now - renewed > GRACE_SECONDS
        ready = next(
            (c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), None
        )
        if stale and ready is not None and ready["status"] != "Unknown":
            _lost(cluster, node, now)
        elif not stale and ready is not None and ready["status"] == "Unknown":
            _back(cluster, node, now)
        if _unreachable_taints(node):
            _evict(cluster, node, now)


def _lost(cluster: Cluster, node: Obj, now: float) -> None:
    node = dict(node)
    ts = cluster.stamp(now)
    for cond in node["status"].get("conditions") or []:
        if cond["type"] in CONDITIONS:
            cond.update(
                status="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
                lastTransitionTime=ts,
            )
    taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE]
    taints += [
        {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": ts},
        {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": ts},
    ]
    node["spec"]["taints"] = taints
    cluster.store.put("nodes", node)
    name = node["metadata"]["name"]
    cluster.record_event(
        node, "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady",
        "node-controller",
    )  # fmt: skip
    for pod in cluster.store.iter("pods"):
        if pod["spec"].get("nodeName") != name:
            continue
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "Ready" and cond["status"] == "True":
                cond.update(status="False", lastTransitionTime=ts)
                cluster.store.put("pods", pod)


def _back(cluster: Cluster, node: Obj, now: float) -> None:
    node = dict(node)
    ts = cluster.stamp(now)
    # What the kubelet posts again once it is back.
    node["status"]["conditions"] = node_conditions(ts)
    node["spec"]["taints"] = [
        t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE
    ] or None
    if node["spec"]["taints"] is None:
        node["spec"].pop("taints")
    cluster.store.put("nodes", node)
    name = node["metadata"]["name"]
    cluster.record_event(
        node, "Normal", "NodeReady", f"Node {name} status is now: NodeReady", "node-controller"
    )
    # The kubelet's next status sync: a running pod whose containers are ready is Ready again.
    for pod in cluster.store.iter("pods"):
        if pod["spec"].get("nodeName") != name or pod["metadata"].get("deletionTimestamp"):
            continue
        statuses = pod["status"].get("containerStatuses") or []
        if pod["status"].get("phase") != "Running" or not all(c.get("ready") for c in statuses):
            continue
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "Ready" and cond["status"] == "False":
                cond.update(status="True", lastTransitionTime=ts)
                cluster.store.put("pods", pod)


def _toleration_seconds(pod: Obj) -> float | None:
    """How long the pod tolerates the unreachable NoExecute taint (None: forever)."""
    for tol in pod["spec"].get("tolerations") or []:
        key_ok = tol.get("key") == UNREACHABLE or (
            not tol.get("key") and tol.get("operator") == "Exists"
        )
        if key_ok and tol.get("effect") in (None, "", "NoExecute"):
            seconds = tol.get("tolerationSeconds")
            return None if seconds is None else float(seconds)
    return 0.0  # not tolerated at all: evicted at once


def _evict(cluster: Cluster, node: Obj, now: float) -> None:
    added = next(
        (
            cluster.sim_time(t["timeAdded"])
            for t in _unreachable_taints(node)
            if t.get("effect") == "NoExecute" and t.get("timeAdded")
        ),
        None,
    )
    if added is None:
        return
    name = node["metadata"]["name"]
    for pod in list(cluster.store.iter("pods")):
        meta = pod["metadata"]
        if pod["spec"].get("nodeName") != name or meta.get("deletionTimestamp"):
            continue
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        seconds = _toleration_seconds(pod)
        if seconds is None or now < added + seconds:
            continue
        ts = cluster.stamp(now)
        conditions = [
            c for c in pod["status"].get("conditions") or [] if c["type"] != "DisruptionTarget"
        ]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastTransitionTime": ts,
            }
        )
        pod["status"]["conditions"] = conditions
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        meta["deletionTimestamp"] = cluster.stamp(now + grace)
        meta["deletionGracePeriodSeconds"] = grace
        cluster.store.put("pods", pod)
        cluster.record_event(
            pod,
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {meta['namespace']}/{meta['name']}",
            "taint-eviction-controller",
        )
