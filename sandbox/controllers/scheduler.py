"""The default-scheduler: places pending pods with ``scheduling.schedule``.

Pods are tried in priority order (then age). A pod that does not fit gets the exact
kube-scheduler message as a ``FailedScheduling`` event and ``PodScheduled=False``; it is
retried when bound capacity changes or every ``RETRY_SECONDS``. When preemption finds
victims they get ``DisruptionTarget`` and a ``Preempted`` event and are deleted, and the
preemptor is nominated to the node until they are gone.
"""

from __future__ import annotations

from typing import Any

from sandbox.api import objects
from sandbox.api.resources import BY_KEY
from sandbox.state import Cluster
from sandbox.store import Obj
from scheduling import ClusterSnapshot, node_from_k8s, pod_from_k8s, schedule

RETRY_SECONDS = 15.0  # simulated; real unschedulable pods are also flushed periodically
COMPONENT = "default-scheduler"


class Scheduler:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._attempts: dict[str, tuple[float, int]] = {}  # uid → (time, capacity signature)
        self._pod_cache: dict[tuple[str, str], Any] = {}

    def _converted(self, pod: Obj) -> Any:
        key = (pod["metadata"]["uid"], pod["metadata"]["resourceVersion"])
        cached = self._pod_cache.get(key)
        if cached is None:
            cached = pod_from_k8s(pod)
            self._pod_cache[key] = cached
        return cached

    def reconcile(self) -> None:
        store = self.cluster.store
        now = self.cluster.now()
        # The cached etcd-ordered listing: sorting 10,000 pods every pass to find none
        # pending was most of a quiet pass.
        pods = [pod for _, pod in store.keyed("pods")]
        pending = [
            p
            for p in pods
            if not p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase", "Pending") == "Pending"
            and p["spec"].get("schedulerName", COMPONENT) == COMPONENT
        ]
        gated = [p for p in pending if p["spec"].get("schedulingGates")]
        for pod in gated:
            self._gated(pod)
        pending = [p for p in pending if not p["spec"].get("schedulingGates")]
        if not pending:
            self._attempts.clear()
            return
        bound = [
            p
            for p in pods
            if p["spec"].get("nodeName")
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        signature = hash(frozenset(p["metadata"]["uid"] for p in bound)) ^ store.count("nodes")
        due = []
        for pod in pending:
            last = self._attempts.get(pod["metadata"]["uid"])
            if last is None or last[1] != signature or now - last[0] >= RETRY_SECONDS:
                due.append(pod)
        if not due:
            return
        live = {p["metadata"]["uid"] for p in pods}
        self._attempts = {k: v for k, v in self._attempts.items() if k in live}
        self._pod_cache = {k: v for k, v in self._pod_cache.items() if k[0] in live}
        nodes = [node_from_k8s(n) for n in store.list("nodes")]
        snapshot = ClusterSnapshot(nodes, [self._converted(p) for p in bound])
        due.sort(
            key=lambda p: (
                -int(p["spec"].get("priority") or 0),
                p["metadata"]["creationTimestamp"],
                p["metadata"]["name"],
            )
        )
        for pod in due:
            converted = self._converted(pod)
            result = schedule(converted, snapshot)
            if result.node:
                self._bind(pod, result.node)
                snapshot.add_pod(self._converted(pod), result.node)
                self._attempts.pop(pod["metadata"]["uid"], None)
                continue
            if result.victims and result.nominated_node:
                self._preempt(pod, result.nominated_node, result.victims)
            self._unschedulable(pod, result.message, result.nominated_node)
            self._attempts[pod["metadata"]["uid"]] = (now, signature)

    def _bind(self, pod: Obj, node: str) -> None:
        ts = self.cluster.timestamp()
        pod["spec"]["nodeName"] = node
        status = pod.setdefault("status", {})
        status.pop("nominatedNodeName", None)
        conds = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"]
        conds.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": ts,
            }
        )
        status["conditions"] = conds
        self.cluster.store.put("pods", pod)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.cluster.record_event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {node}",
            COMPONENT,
            action="Binding",
        )

    def _gated(self, pod: Obj) -> None:
        """A pod with scheduling gates waits, unscheduled, until they are all removed."""
        status = pod.setdefault("status", {})
        if any(
            c["type"] == "PodScheduled" and c.get("reason") == "SchedulingGated"
            for c in status.get("conditions") or []
        ):
            return
        conds = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"]
        conds.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": self.cluster.timestamp(),
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
            }
        )
        status["conditions"] = conds
        self.cluster.store.put("pods", pod)

    def _unschedulable(self, pod: Obj, message: str, nominated: str | None) -> None:
        status = pod.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"]
        prev = next(
            (c for c in status.get("conditions") or [] if c["type"] == "PodScheduled"), None
        )
        cond = {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": self.cluster.timestamp(),
            "reason": "Unschedulable",
            "message": message,
        }
        if prev and prev.get("status") == "False":
            cond["lastTransitionTime"] = prev.get("lastTransitionTime", cond["lastTransitionTime"])
        conds.append(cond)
        changed = prev != cond or (nominated and status.get("nominatedNodeName") != nominated)
        status["conditions"] = conds
        if nominated:
            status["nominatedNodeName"] = nominated
        if changed:
            self.cluster.store.put("pods", pod)
        self.cluster.record_event(
            pod, "Warning", "FailedScheduling", message, COMPONENT, action="Scheduling"
        )

    def _preempt(self, preemptor: Obj, node: str, victims: tuple[Any, ...]) -> None:
        store = self.cluster.store
        uid = preemptor["metadata"]["uid"]
        ts = self.cluster.timestamp()
        for victim in victims:
            obj = store.get("pods", victim.namespace, victim.name)
            if obj is None or obj["metadata"].get("deletionTimestamp"):
                continue
            conds = [
                c for c in obj["status"].get("conditions") or [] if c["type"] != "DisruptionTarget"
            ]
            conds.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": ts,
                    "reason": "PreemptionByScheduler",
                    "message": f"{COMPONENT}: preempting to accommodate a higher priority pod",
                }
            )
            obj["status"]["conditions"] = conds
            store.put("pods", obj)
            self.cluster.record_event(
                obj,
                "Normal",
                "Preempted",
                f"Preempted by pod {uid} on node {node}",
                COMPONENT,
                action="Preempting",
            )
            objects.delete(self.cluster, BY_KEY["pods"], victim.namespace, victim.name, {})
        preemptor["status"]["nominatedNodeName"] = node
