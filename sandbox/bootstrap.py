"""First start: the namespaces, PriorityClasses and nodes a fresh cluster has; every start:
the CustomResourceDefinitions of the operators the cluster runs (``sandbox/crds/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sandbox.api import crds, objects
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


CRD_DIR = Path(__file__).parent / "crds"


def install_crds(cluster: Cluster, directory: Path = CRD_DIR) -> list[str]:
    """Create the CRDs of ``directory`` (Kueue's...) as their operators' installs do, or
    bring a stored one up to date; returns the names created or updated."""
    rt = BY_KEY[crds.CRD_KEY]
    changed = []
    for path in sorted(directory.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            name = crd["metadata"]["name"]
            stored = cluster.store.get(rt.key, "", name)
            if stored is None:
                objects.create(cluster, rt, "", crd, check_schema=False)
            elif stored.get("spec") != crd["spec"]:
                body = {**crd, "metadata": {**crd["metadata"], **_kept(stored["metadata"])}}
                objects.update(cluster, rt, "", name, body, check_schema=False)
            else:
                continue
            changed.append(name)
    return changed


def _kept(meta: dict[str, Any]) -> dict[str, Any]:
    return {"resourceVersion": meta["resourceVersion"]}
