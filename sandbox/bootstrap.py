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


TRAINER_VERSION = "v2.3.0"
# Trainer's shipped runtime (manifests/base/runtimes/torch_distributed.yaml in
# kubeflow/trainer v2.3): one replicated job, ``node``, whose container ``node`` the
# TrainJob's trainer fills in.
TORCH_DISTRIBUTED: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {
        "name": "torch-distributed",
        "labels": {"trainer.kubeflow.org/framework": "torch"},
    },
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "node",
                                                "image": "pytorch/pytorch:2.13.0-cuda13.0-"
                                                "cudnn9-runtime",
                                            }
                                        ]
                                    }
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}


def install_training_runtimes(cluster: Cluster) -> bool:
    """Trainer's install puts ``torch-distributed`` in place once; a platform team may
    delete or change it afterwards, and a restart leaves it as they did. True when made."""
    key = "clustertrainingruntimes.trainer.kubeflow.org"
    with cluster.store.lock:
        if key not in BY_KEY or cluster.store.meta_get("training_runtimes_installed"):
            return False
        if cluster.store.get(key, "", "torch-distributed") is None:
            objects.create(cluster, BY_KEY[key], "", TORCH_DISTRIBUTED, check_schema=False)
        # The install's namespace and the ConfigMap Kubeflow's SDK reads Trainer's version
        # from (it only warns without it).
        if cluster.store.get("namespaces", "", "kubeflow-system") is None:
            objects.create(
                cluster,
                BY_KEY["namespaces"],
                "",
                {"metadata": {"name": "kubeflow-system"}},
                check_schema=False,
            )
        public = {
            "metadata": {"name": "kubeflow-trainer-public", "namespace": "kubeflow-system"},
            "data": {"kubeflow_trainer_version": TRAINER_VERSION},
        }
        if cluster.store.get("configmaps", "kubeflow-system", "kubeflow-trainer-public") is None:
            objects.create(
                cluster, BY_KEY["configmaps"], "kubeflow-system", public, check_schema=False
            )
        cluster.store.meta_set("training_runtimes_installed", True)
        return True
