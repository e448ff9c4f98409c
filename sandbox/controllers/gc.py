"""Garbage collector, namespace lifecycle and ResourceQuota status.

1. Dependents whose controller owner is gone are deleted (Background propagation).
2. Owners marked ``foregroundDeletion`` lose their dependents first, then go themselves.
3. Terminating namespaces are emptied, then removed.
4. Every ResourceQuota's ``status.used`` follows the live pods.
5. Events older than the event TTL expire.
"""

from __future__ import annotations

import contextlib

from sandbox.api import admission, objects
from sandbox.api.resources import BY_KEY, RESOURCES
from sandbox.errors import ApiError
from sandbox.state import Cluster

OWNER_KINDS = ("jobs.batch", "replicasets.apps", "deployments.apps", "daemonsets.apps")
# Operators' objects that own others (where their CRDs are served): a PyTorchJob its pods
# and Services, a JobSet its Jobs and Service, a TrainJob its JobSet.
OPERATOR_KINDS = (
    "pytorchjobs.kubeflow.org",
    "jobsets.jobset.x-k8s.io",
    "trainjobs.trainer.kubeflow.org",
)
TRACKED_OWNERS = (
    "Job",
    "ReplicaSet",
    "Deployment",
    "DaemonSet",
    "PyTorchJob",
    "JobSet",
    "TrainJob",
)
# What the collector deletes once its owner is gone (operators' kinds where served).
DEPENDENT_KINDS = ("pods", "replicasets.apps", "services", "jobs.batch", "jobsets.jobset.x-k8s.io")


def _delete(cluster: Cluster, key: str, ns: str, name: str, policy: str = "Background") -> None:
    with contextlib.suppress(ApiError):  # already gone: nothing to collect
        objects.delete(cluster, BY_KEY[key], ns, name, {"propagationPolicy": policy})


def reconcile(cluster: Cluster) -> None:
    # Steps 1–4 read nothing but the objects: when none changed since a run of them that
    # changed nothing, they would change nothing again. Events don't count (step 5).
    store = cluster.store
    versions = tuple(store.version(rt.key) for rt in RESOURCES if rt.key != "events")
    if cluster.settled.get("gc", {}).get("versions") != versions:
        _collect(cluster)
        after = tuple(store.version(rt.key) for rt in RESOURCES if rt.key != "events")
        cluster.settled["gc"] = {"versions": versions} if after == versions else {}
    cluster.expire_events()


def _collect(cluster: Cluster) -> None:
    store = cluster.store
    owners = [*OWNER_KINDS, *(k for k in OPERATOR_KINDS if k in BY_KEY)]
    live_uids = {o["metadata"]["uid"] for key in owners for o in store.iter(key)}
    for key in (k for k in DEPENDENT_KINDS if k in BY_KEY):
        for obj in store.iter(key):
            refs = obj["metadata"].get("ownerReferences") or []
            tracked = [r for r in refs if r.get("kind") in TRACKED_OWNERS]
            if tracked and not any(r.get("uid") in live_uids for r in tracked):
                if key == "pods" and obj["metadata"].get("deletionTimestamp"):
                    continue
                _delete(cluster, key, obj["metadata"]["namespace"], obj["metadata"]["name"])
    for key in OWNER_KINDS:
        for obj in store.iter(key):
            meta = obj["metadata"]
            if "foregroundDeletion" not in (meta.get("finalizers") or []):
                continue
            deps = objects.dependents(cluster, meta["uid"])
            for drt, dep in deps:
                if not dep["metadata"].get("deletionTimestamp"):
                    _delete(
                        cluster,
                        drt.key,
                        dep["metadata"]["namespace"],
                        dep["metadata"]["name"],
                        "Foreground",
                    )
            if not objects.dependents(cluster, meta["uid"]):
                store.delete(key, meta["namespace"], meta["name"])
    for ns_obj in store.iter("namespaces"):
        if ns_obj.get("status", {}).get("phase") != "Terminating":
            continue
        name = ns_obj["metadata"]["name"]
        remaining = 0
        for rt in RESOURCES:
            if not rt.namespaced:
                continue
            for obj in store.list(rt.key, name):
                remaining += 1
                if rt.plural == "pods":
                    # The namespace controller waits for pods; ours stop at once.
                    store.delete("pods", name, obj["metadata"]["name"])
                    objects.release_pod(cluster, obj)
                else:
                    store.delete(rt.key, name, obj["metadata"]["name"])
        if remaining == 0:
            store.delete("namespaces", "", name)
    for rq in store.iter("resourcequotas"):
        hard = dict((rq.get("spec") or {}).get("hard") or {})
        used = admission.quota_used(cluster, rq["metadata"]["namespace"], hard)
        status = {"hard": hard, "used": {k: admission.fmt(k, v, hard[k]) for k, v in used.items()}}
        if rq.get("status") != status:
            rq["status"] = status
            store.put("resourcequotas", rq)
