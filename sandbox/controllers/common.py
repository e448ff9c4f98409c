"""Helpers the workload controllers share: owned pods, conditions, pod creation."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from sandbox.api import objects
from sandbox.api.resources import BY_KEY
from sandbox.errors import ApiError
from sandbox.state import Cluster
from sandbox.store import Obj

TERMINAL = ("Succeeded", "Failed")


def owned_by(cluster: Cluster, res: str, ns: str, uid: str) -> list[Obj]:
    """Objects of ``res`` in ``ns`` whose controller owner is ``uid`` (the store's index)."""
    return cluster.store.owned(res, ns, uid)


def sync_signature(cluster: Cluster, owner: Obj, owned_res: str) -> tuple[str, int]:
    """The owner's resourceVersion and the stamp of the objects it controls."""
    meta = owner["metadata"]
    return (meta.get("resourceVersion", ""), cluster.store.owned_stamp(owned_res, meta["uid"]))


def sync_all(
    cluster: Cluster, res: str, owned_res: str, sync: Callable[[Cluster, Obj], bool]
) -> None:
    """Sync every live object of ``res`` whose inputs changed; write back changed statuses.

    Real controllers sync an object when it, or an object it owns, changes, or when a
    timer they set fires; they do not rescan 10,000 settled Jobs every 50 ms (that held
    the store lock for most of each second and kept API requests waiting). An object is
    settled once a sync of it changed nothing (neither its status nor what it owns) and
    ``sync`` returned False (no deadline or backoff waiting on the clock); it is skipped
    while its resourceVersion and its owned objects' stay the same.
    """
    settled = cluster.settled.get(res, {})
    still: dict[str, tuple[Any, ...]] = {}
    store = cluster.store
    for obj in store.iter(res):
        meta = obj["metadata"]
        if not store.still_stored_after_yield(res, obj):
            continue
        if meta.get("deletionTimestamp"):
            continue
        signature = sync_signature(cluster, obj, owned_res)
        if settled.get(meta["uid"]) == signature:
            still[meta["uid"]] = signature
            continue
        before = repr(obj.get("status"))
        waits = sync(cluster, obj)
        if repr(obj.get("status")) != before:
            store.put(res, obj)
        elif not waits and sync_signature(cluster, obj, owned_res) == signature:
            still[meta["uid"]] = signature
    cluster.settled[res] = still


def owner_ref(owner: Obj) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_active(pod: Obj) -> bool:
    return pod["status"].get("phase") not in TERMINAL and not pod["metadata"].get(
        "deletionTimestamp"
    )


def is_ready(pod: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod["status"].get("conditions") or []
    )


def condition(
    ctype: str,
    status: str,
    reason: str,
    message: str,
    ts: str,
    probe_field: str | None = "lastProbeTime",
) -> dict[str, Any]:
    """A status condition. Its "last checked" time is named per kind: ``lastProbeTime``
    (Job, Pod), ``lastUpdateTime`` (Deployment); a ReplicaSet's has none (None)."""
    cond: dict[str, Any] = {"type": ctype, "status": status}
    if probe_field:
        cond[probe_field] = ts
    cond.update(lastTransitionTime=ts, reason=reason, message=message)
    return cond


def set_condition(obj: Obj, cond: dict[str, Any], probe: bool = True) -> None:
    """Upsert a condition; lastTransitionTime only moves when the status flips."""
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    for i, old in enumerate(conds):
        if old["type"] == cond["type"]:
            if old.get("status") == cond["status"]:
                cond["lastTransitionTime"] = old.get("lastTransitionTime")
                same = old.get("reason") == cond.get("reason") and old.get("message") == cond.get(
                    "message"
                )
                for field in ("lastProbeTime", "lastUpdateTime"):
                    if same and not probe and field in cond:
                        cond[field] = old.get(field)
            conds[i] = cond
            return
    conds.append(cond)


def get_condition(obj: Obj, ctype: str) -> dict[str, Any] | None:
    return next(
        (c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == ctype), None
    )


def create_pod(
    cluster: Cluster,
    owner: Obj,
    template: dict[str, Any],
    generate_name: str,
    component: str,
    extra_labels: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
    spec_patch: dict[str, Any] | None = None,
    name: str = "",
) -> tuple[Obj | None, str | None]:
    """Create one pod from ``template`` through full admission, named ``name`` (an
    operator's fixed names) or from ``generate_name``.

    Returns (pod, None) or (None, error message); the caller records ``FailedCreate``.
    """
    meta = copy.deepcopy(template.get("metadata") or {})
    body: Obj = {
        "metadata": {
            **({"name": name} if name else {"generateName": generate_name}),
            "namespace": owner["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), **(extra_labels or {})},
            "annotations": {**(meta.get("annotations") or {}), **(extra_annotations or {})},
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": {**copy.deepcopy(template.get("spec") or {}), **(spec_patch or {})},
    }
    if not body["metadata"]["annotations"]:
        body["metadata"].pop("annotations")
    try:
        pod, _ = objects.create(
            cluster, BY_KEY["pods"], owner["metadata"]["namespace"], body, check_schema=False
        )
    except ApiError as err:
        return None, err.message
    cluster.record_event(
        owner, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}", component
    )
    return pod, None


def delete_pod(cluster: Cluster, owner: Obj, pod: Obj, component: str) -> None:
    try:
        objects.delete(
            cluster, BY_KEY["pods"], pod["metadata"]["namespace"], pod["metadata"]["name"], {}
        )
    except ApiError:
        return
    cluster.record_event(
        owner, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}", component
    )
