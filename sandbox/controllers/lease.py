"""Node heartbeats: each simulated kubelet holds a ``coordination.k8s.io/v1`` Lease named
after its node in ``kube-node-lease`` and renews it every 10 seconds, as a real kubelet
does (``kubectl describe node`` reads it). A cordoned node still renews; a node that is down
(``sandbox.faults``) does not."""

from __future__ import annotations

from sandbox import faults
from sandbox.api import objects
from sandbox.api.resources import BY_KEY
from sandbox.state import Cluster

NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40  # the kubelet's default nodeLeaseDurationSeconds
RENEW_EVERY = 10.0  # a quarter of it, as the kubelet renews


def reconcile(cluster: Cluster) -> None:
    store, rt = cluster.store, BY_KEY["leases.coordination.k8s.io"]
    now = cluster.now()
    renewed = cluster.settled.setdefault("leases", {})  # node → (last renewal,)
    for node in list(store.iter("nodes")):
        name = node["metadata"]["name"]
        if now - renewed.get(name, (0.0,))[0] < RENEW_EVERY or faults.node_down(cluster, name):
            continue
        lease = store.get(rt.key, NAMESPACE, name)
        if lease is None:
            objects.create(
                cluster,
                rt,
                NAMESPACE,
                {
                    "metadata": {
                        "name": name,
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": name,
                                "uid": node["metadata"]["uid"],
                            }
                        ],
                    },
                    "spec": {
                        "holderIdentity": name,
                        "leaseDurationSeconds": LEASE_SECONDS,
                        "renewTime": cluster.stamp_micro(now),
                    },
                },
                check_schema=False,
            )
        else:
            lease = dict(lease)
            lease["spec"] = {**lease.get("spec", {}), "renewTime": cluster.stamp_micro(now)}
            objects.update(cluster, rt, NAMESPACE, name, lease, check_schema=False)
        renewed[name] = (now,)
