"""Deployment and ReplicaSet controllers (apps/v1).

A Deployment owns one ReplicaSet per pod-template hash (``<deploy>-<hash>``); template
changes create a new ReplicaSet and scale the old ones to zero (a one-step rollout — the
sandbox does not pace surges). ReplicaSets keep ``replicas`` pods, replacing deleted or
evicted ones; a refused create becomes a ``FailedCreate`` event and a ``ReplicaFailure``
condition that the Deployment copies, as a real controller does.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from sandbox.api import objects
from sandbox.api.resources import BY_KEY
from sandbox.controllers.common import (
    condition,
    create_pod,
    delete_pod,
    get_condition,
    is_active,
    is_ready,
    owned_by,
    owner_ref,
    set_condition,
    sync_all,
)
from sandbox.errors import ApiError
from sandbox.state import Cluster
from sandbox.store import Obj

RS_COMPONENT = "replicaset-controller"
DEPLOY_COMPONENT = "deployment-controller"
HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
# The API server's safe-encoding alphabet for hashes in names.
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: dict[str, Any]) -> str:
    digest = int(hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:12], 16)
    out = ""
    for _ in range(10):
        digest, r = divmod(digest, len(_ALPHABET))
        out += _ALPHABET[r]
    return out


def _max_unavailable(d: Obj) -> int:
    replicas = int(d["spec"].get("replicas", 1))
    raw = ((d["spec"].get("strategy") or {}).get("rollingUpdate") or {}).get(
        "maxUnavailable", "25%"
    )
    if isinstance(raw, str) and raw.endswith("%"):
        return int(replicas * int(raw[:-1]) // 100)
    return int(raw)


def deployment_condition(ctype: str, status: str, reason: str, message: str, ts: str) -> Obj:
    """A DeploymentCondition: ``lastUpdateTime``, not a Pod's or Job's ``lastProbeTime``."""
    return condition(ctype, status, reason, message, ts, probe_field="lastUpdateTime")


def reconcile(cluster: Cluster) -> None:
    sync_all(cluster, "deployments.apps", "replicasets.apps", _reconcile_deployment)
    sync_all(cluster, "replicasets.apps", "pods", _reconcile_replicaset)


def _scale(cluster: Cluster, d: Obj, rs: Obj, replicas: int) -> None:
    old = int(rs["spec"].get("replicas", 0))
    if old == replicas:
        return
    rs["spec"]["replicas"] = replicas
    rs["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/desired-replicas"] = str(
        d["spec"].get("replicas", 1)
    )
    rs["metadata"]["generation"] = int(rs["metadata"].get("generation", 1)) + 1
    cluster.store.put("replicasets.apps", rs)
    verb = "up" if replicas > old else "down"
    cluster.record_event(
        d,
        "Normal",
        "ScalingReplicaSet",
        f"Scaled {verb} replica set {rs['metadata']['name']} from {old} to {replicas}",
        DEPLOY_COMPONENT,
    )


def _reconcile_deployment(cluster: Cluster, d: Obj) -> bool:
    """Sync one Deployment; True while its rollout is unfinished (progressDeadlineSeconds).

    1. Find (or create) the ReplicaSet of the current template (its pod-template-hash).
    2. Scale it to the Deployment's replicas and every older one to zero.
    3. Sum the ReplicaSets' counts into the Deployment's status.
    4. Set its conditions: Available, Progressing (with the progress deadline), and
       ReplicaFailure copied from the new ReplicaSet.
    """
    now = cluster.now()
    ts = cluster.stamp(now)
    meta, spec = d["metadata"], d["spec"]
    replicas = int(spec.get("replicas", 1))
    owned = owned_by(cluster, "replicasets.apps", meta["namespace"], meta["uid"])
    new_rs = _current_replicaset(cluster, d, owned, replicas, ts)
    if new_rs is None:
        return True
    _scale(cluster, d, new_rs, replicas)
    for rs in owned:
        if rs is not new_rs and int(rs["spec"].get("replicas", 0)) > 0:
            _scale(cluster, d, rs, 0)
    all_rs = owned_by(cluster, "replicasets.apps", meta["namespace"], meta["uid"])
    total, available, updated = _rollup_status(d, all_rs, new_rs, replicas)
    _set_available(d, available >= replicas - _max_unavailable(d), ts)
    complete = updated == replicas and available >= replicas and total == replicas
    _set_progressing(cluster, d, new_rs["metadata"]["name"], complete, now, ts)
    _copy_replica_failure(d, new_rs)
    return not complete


def _current_replicaset(
    cluster: Cluster, d: Obj, owned: list[Obj], replicas: int, ts: str
) -> Obj | None:
    """The ReplicaSet of the Deployment's current template, created (with the next revision)
    when there is none; None when the API refused to create it (the next pass retries)."""
    meta, spec = d["metadata"], d["spec"]
    h = template_hash(spec["template"])
    found = next((r for r in owned if r["metadata"].get("labels", {}).get(HASH_LABEL) == h), None)
    if found is not None:
        return found
    revision = 1 + max(
        [int((r["metadata"].get("annotations") or {}).get(REVISION_ANNOTATION, "0")) for r in owned]
        or [0]
    )
    template = copy.deepcopy(spec["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = h
    selector = copy.deepcopy(spec["selector"])
    selector.setdefault("matchLabels", {})[HASH_LABEL] = h
    body = {
        "metadata": {
            "name": f"{meta['name']}-{h}",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "annotations": {
                "deployment.kubernetes.io/desired-replicas": str(replicas),
                "deployment.kubernetes.io/max-replicas": str(replicas + max(1, replicas // 4)),
                REVISION_ANNOTATION: str(revision),
            },
            "ownerReferences": [owner_ref(d)],
        },
        "spec": {"replicas": 0, "selector": selector, "template": template},
    }
    try:
        created, _ = objects.create(
            cluster, BY_KEY["replicasets.apps"], meta["namespace"], body, check_schema=False
        )
    except ApiError:
        return None
    set_condition(
        d,
        deployment_condition(
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            f'Created new replica set "{created["metadata"]["name"]}"',
            ts,
        ),
    )
    return created


def _rollup_status(d: Obj, all_rs: list[Obj], new_rs: Obj, replicas: int) -> tuple[int, int, int]:
    """Write the replica counts of every ReplicaSet into the Deployment's status (a zero
    count is left out, as the API server omits it); returns (total, available, updated)."""
    status = d.setdefault("status", {})

    def count(key: str) -> int:
        return sum(int((r.get("status") or {}).get(key, 0)) for r in all_rs)

    total, ready, available = count("replicas"), count("readyReplicas"), count("availableReplicas")
    updated = int((new_rs.get("status") or {}).get("replicas", 0))
    status["observedGeneration"] = d["metadata"].get("generation", 1)
    for key, value in (
        ("replicas", total),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", max(0, replicas - available)),
    ):
        if value:
            status[key] = value
        else:
            status.pop(key, None)
    return total, available, updated


def _set_available(d: Obj, available: bool, ts: str) -> None:
    if available:
        condition = deployment_condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            ts,
        )
    else:
        condition = deployment_condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            ts,
        )
    set_condition(d, condition, probe=False)


def _set_progressing(
    cluster: Cluster, d: Obj, rs_name: str, complete: bool, now: float, ts: str
) -> None:
    """Progressing: True while the rollout advances, False once it has taken longer than
    ``progressDeadlineSeconds`` (600) since it last progressed."""
    progressing = get_condition(d, "Progressing")
    if complete:
        condition = deployment_condition(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            f'ReplicaSet "{rs_name}" has successfully progressed.',
            ts,
        )
    else:
        started = cluster.sim_time(progressing["lastTransitionTime"]) if progressing else now
        deadline = float(d["spec"].get("progressDeadlineSeconds", 600))
        if now - started > deadline:
            condition = deployment_condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{rs_name}" has timed out progressing.',
                ts,
            )
        elif not progressing or progressing.get("reason") not in (
            "NewReplicaSetCreated",
            "ReplicaSetUpdated",
        ):
            condition = deployment_condition(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" is progressing.',
                ts,
            )
        else:
            return
    set_condition(d, condition, probe=False)


def _copy_replica_failure(d: Obj, new_rs: Obj) -> None:
    """The new ReplicaSet's ReplicaFailure (e.g. a quota refused its pods), on the
    Deployment while it lasts."""
    failure = get_condition(new_rs, "ReplicaFailure")
    if failure and failure["status"] == "True":
        copied = {k: v for k, v in failure.items() if k != "lastProbeTime"}
        set_condition(
            d, {**copied, "lastUpdateTime": failure.get("lastTransitionTime")}, probe=False
        )
    elif get_condition(d, "ReplicaFailure"):
        status = d["status"]
        status["conditions"] = [c for c in status["conditions"] if c["type"] != "ReplicaFailure"]


def _reconcile_replicaset(cluster: Cluster, rs: Obj) -> bool:
    """Sync one ReplicaSet; True while it lacks pods (creation may be backing off)."""
    now = cluster.now()
    ts = cluster.stamp(now)
    meta, spec = rs["metadata"], rs["spec"]
    ns, name = meta["namespace"], meta["name"]
    status = rs.setdefault("status", {})
    pods = owned_by(cluster, "pods", ns, meta["uid"])
    # A failed pod of a ReplicaSet is replaced, not restarted in place.
    for pod in pods:
        if pod["status"].get("phase") in ("Failed", "Succeeded") and not pod["metadata"].get(
            "deletionTimestamp"
        ):
            delete_pod(cluster, rs, pod, RS_COMPONENT)
    active = [p for p in pods if is_active(p)]
    wanted = int(spec.get("replicas", 0))
    book_key = f"rs/{meta['uid']}"
    book = cluster.store.meta_get(book_key) or {"next_create": 0.0, "failures": 0}
    if len(active) < wanted and now >= book["next_create"]:
        error = None
        for _ in range(wanted - len(active)):
            created, error = create_pod(cluster, rs, spec["template"], f"{name}-", RS_COMPONENT)
            if error:
                cluster.record_event(
                    rs, "Warning", "FailedCreate", f"Error creating: {error}", RS_COMPONENT
                )
                set_condition(
                    rs,
                    condition(
                        "ReplicaFailure", "True", "FailedCreate", error, ts, probe_field=None
                    ),
                    probe=False,
                )
                book["failures"] += 1
                book["next_create"] = now + min(300.0, 5.0 * 2 ** (book["failures"] - 1))
                break
            if created is not None:
                active.append(created)
        if error is None:
            book = {"next_create": 0.0, "failures": 0}
            if get_condition(rs, "ReplicaFailure"):
                status["conditions"] = [
                    c for c in status["conditions"] if c["type"] != "ReplicaFailure"
                ]
        cluster.store.meta_set(book_key, book)
    elif len(active) > wanted:
        # Delete the least useful first: unscheduled, then not ready, then newest.
        def rank(p: Obj) -> tuple[int, int, str]:
            return (
                1 if p["spec"].get("nodeName") else 0,
                1 if is_ready(p) else 0,
                "".join(chr(255 - ord(ch)) for ch in p["metadata"]["creationTimestamp"]),
            )

        for pod in sorted(active, key=rank)[: len(active) - wanted]:
            delete_pod(cluster, rs, pod, RS_COMPONENT)
            active.remove(pod)
    ready = sum(1 for p in active if is_ready(p))
    status["replicas"] = len(active)
    status["fullyLabeledReplicas"] = len(active)
    status["observedGeneration"] = meta.get("generation", 1)
    for key, value in (("readyReplicas", ready), ("availableReplicas", ready)):
        if value:
            status[key] = value
        else:
            status.pop(key, None)
    if not status.get("conditions"):
        status.pop("conditions", None)
    if status.get("fullyLabeledReplicas") == 0:
        status.pop("fullyLabeledReplicas")
    return len(active) < wanted
