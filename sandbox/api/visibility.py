"""Kueue's visibility API (``visibility.kueue.x-k8s.io/v1beta2``): the pending workloads of
a ClusterQueue, or of a LocalQueue, in the order Kueue will consider them, with each one's
0-based position in its ClusterQueue and in its LocalQueue (``?limit`` default 1000, at most
100000; ``?offset``)."""

from __future__ import annotations

from typing import Any

from sandbox.api.resources import ResourceType
from sandbox.controllers import kueue
from sandbox.errors import not_found
from sandbox.state import Cluster

MAX_LIMIT = 100_000


def pending_workloads(
    cluster: Cluster, rt: ResourceType, ns: str, name: str, query: dict[str, str]
) -> dict[str, Any]:
    store = cluster.store
    if rt.plural == "clusterqueues":
        if store.get(kueue.CLUSTER_QUEUES, "", name) is None:
            raise not_found("clusterqueue", "visibility.kueue.x-k8s.io", name)
        queue, local = name, None
    else:
        lq = store.get(kueue.LOCAL_QUEUES, ns, name)
        if lq is None:
            raise not_found("localqueue", "visibility.kueue.x-k8s.io", name)
        queue, local = (lq.get("spec") or {}).get("clusterQueue", ""), (ns, name)
    ordered = kueue.pending_in(cluster, queue)
    in_local: dict[tuple[str, str], int] = {}
    items = []
    for position, workload in enumerate(ordered):
        key = (workload["metadata"]["namespace"], workload["spec"].get("queueName", ""))
        local_position = in_local.get(key, 0)
        in_local[key] = local_position + 1
        if local is not None and key != local:
            continue
        meta = workload["metadata"]
        items.append(
            {
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "creationTimestamp": meta.get("creationTimestamp"),
                    "ownerReferences": [
                        {k: r[k] for k in ("apiVersion", "kind", "name", "uid")}
                        for r in meta.get("ownerReferences") or []
                    ],
                },
                "priority": int(workload["spec"].get("priority") or 0),
                "localQueueName": key[1],
                "positionInClusterQueue": position,
                "positionInLocalQueue": local_position,
            }
        )
    offset, limit = _bounded(query.get("offset"), 0), _bounded(query.get("limit"), 1000)
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
        "metadata": {"creationTimestamp": None},
        "items": items[offset : offset + min(limit, MAX_LIMIT)],
    }


def _bounded(value: str | None, default: int) -> int:
    try:
        return max(0, int(value)) if value is not None else default
    except ValueError:
        return default
