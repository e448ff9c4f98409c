"""Create, read, update, patch and delete any object, the way the API server's registry does.

Handlers and controllers both come through here, so a pod the Job controller creates
passes the same defaulting and admission (priority, LimitRange, PodSecurity, quota) as a
pod a user posts.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
from typing import Any

import yaml

from sandbox.api import admission, crds, defaults, ssa, validation
from sandbox.api.patch import json_patch, merge_patch, strategic_merge_patch
from sandbox.api.resources import RESOURCES, ResourceType
from sandbox.controllers.kubelet import release_devices
from sandbox.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    forbidden,
    not_found,
)
from sandbox.label_selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from sandbox.state import Cluster
from sandbox.store import Obj

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
JOB_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)


def _check_namespace(cluster: Cluster, rt: ResourceType, ns: str, name: str) -> None:
    ns_obj = cluster.store.get("namespaces", "", ns)
    if ns_obj is None:
        raise not_found("namespaces", "", ns)
    if ns_obj.get("status", {}).get("phase") == "Terminating":
        raise forbidden(
            rt.plural,
            rt.group,
            name,
            f"unable to create new content in namespace {ns} because it is being terminated",
        )


def _qos_class(pod: Obj) -> str:
    containers = pod["spec"].get("containers") or []
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if any(k in ("cpu", "memory") for k in list(req) + list(lim)):
            any_set = True
        for k in ("cpu", "memory"):
            if k not in lim or req.get(k, lim.get(k)) != lim.get(k):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _prepare_kind(cluster: Cluster, rt: ResourceType, obj: Obj) -> list[str]:
    """Kind-specific create-time filling; returns warnings."""
    meta = obj["metadata"]
    spec = obj.get("spec")
    warnings: list[str] = []
    if rt.plural == "namespaces":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif rt.plural == "jobs" and isinstance(spec, dict):
        uid = meta["uid"]
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        labels = spec["template"]["metadata"].setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": uid,
                "job-name": meta["name"],
            }
        )
        if not meta.get("labels"):
            # Job defaulting: a Job without labels takes its pod template's labels.
            meta["labels"] = dict(labels)
        obj["status"] = {}
        admission.kueue_job_defaults(obj)
        warnings += admission.workload_warnings(
            cluster, meta["namespace"], spec["template"]["spec"]
        )
    elif rt.key == "jobsets.jobset.x-k8s.io":
        admission.jobset_defaults(obj)
    elif rt.key == "trainjobs.trainer.kubeflow.org":
        admission.trainjob_admission(cluster, obj)
    elif rt.plural in ("deployments", "replicasets") and isinstance(spec, dict):
        obj["status"] = {}
        if rt.plural == "deployments":
            meta.setdefault("annotations", {})
            warnings += admission.workload_warnings(
                cluster, meta["namespace"], spec["template"]["spec"]
            )
    elif rt.plural == "pods":
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(obj)}
    elif rt.plural == "persistentvolumeclaims" and isinstance(spec, dict):
        _bind_claim(obj)
    elif rt.plural == "resourcequotas":
        hard = dict((spec or {}).get("hard") or {})
        used = admission.quota_used(cluster, meta["namespace"], hard)
        obj["status"] = {
            "hard": hard,
            "used": {k: admission.fmt(k, v, hard[k]) for k, v in used.items()},
        }
    elif rt.plural == "services" and isinstance(spec, dict):
        if spec.get("clusterIP") != "None":
            n = cluster.store.count("services") + 10
            spec.setdefault("clusterIP", f"10.96.{n // 250}.{n % 250 + 1}")
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        obj["status"] = {"loadBalancer": {}}
    elif rt.plural == "serviceaccounts":
        pass
    return warnings


def create(
    cluster: Cluster,
    rt: ResourceType,
    ns: str,
    body: Any,
    *,
    field_validation: str = "Warn",
    dry_run: bool = False,
    check_schema: bool = True,
    manager: str | None = None,
    applied: bool = False,
) -> tuple[Obj, list[str]]:
    """POST: generate name, validate, default, admit and store. Returns (object, warnings).

    With ``manager``, the fields the request set are that manager's (``managedFields``):
    an ``Update``, or an ``Apply`` when ``applied`` (server-side apply creating)."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request was in an unknown format")
    obj = copy.deepcopy(body)
    requested = copy.deepcopy(body)
    obj["apiVersion"] = rt.api_version
    obj["kind"] = rt.kind
    meta = _named_in_namespace(cluster, rt, ns, obj)
    name = meta.get("name") or ""
    warnings = validation.check_schema(rt, obj, field_validation) if check_schema else []
    defaults.apply_defaults(rt, obj)
    validation.validate_object(rt, obj)
    if rt.namespaced:
        _check_namespace(cluster, rt, ns, name)
    key_ns = ns if rt.namespaced else ""
    if cluster.store.get(rt.key, key_ns, name) is not None:
        raise already_exists(rt.plural, rt.group, name)
    _stamp_new(cluster, rt, obj, requested, manager=manager, applied=applied)
    warnings += _prepare_kind(cluster, rt, obj)
    if rt.plural == "pods":
        admission.kueue_pod_defaults(obj)
        admission.admit_pod(cluster, obj)
        obj["status"]["qosClass"] = _qos_class(obj)
    if rt.key == crds.CRD_KEY:
        crds.accepted(obj, meta["creationTimestamp"])
    if dry_run:
        return obj, warnings
    cluster.store.put(rt.key, obj)
    if rt.plural == "pods":
        admission.quota_charge(cluster, obj)
    if rt.key == crds.CRD_KEY:
        crds.register(obj)
    return obj, warnings


DEFAULT_STORAGE_CLASS = "standard"


def _bind_claim(claim: Obj) -> None:
    """A claim of the default StorageClass (``standard``, set by the DefaultStorageClass
    admission plugin when it names none), bound at once to a new volume of its size, as
    an ``Immediate`` provisioner does. Its files live in the sandbox's state folder
    (``volumes/<namespace>/<claim>``) while the claim does."""
    spec = claim["spec"]
    if spec.get("storageClassName") is None:
        spec["storageClassName"] = DEFAULT_STORAGE_CLASS
    spec.setdefault("volumeMode", "Filesystem")
    spec["volumeName"] = f"pvc-{claim['metadata']['uid']}"
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    claim["status"] = {
        "phase": "Bound",
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "capacity": {"storage": size},
    }
    claim["metadata"].setdefault("annotations", {}).update(
        {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
            "volume.kubernetes.io/storage-provisioner": "sandbox.gpu-portal.dev/hostpath",
        }
    )


def _named_in_namespace(cluster: Cluster, rt: ResourceType, ns: str, obj: Obj) -> Obj:
    """The new object's metadata with the request's namespace (refused when the body names
    another) and a name generated from ``generateName`` when it has none."""
    meta: Obj = obj.setdefault("metadata", {}) or {}
    obj["metadata"] = meta
    if rt.namespaced:
        if meta.get("namespace") not in (None, "", ns):
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        meta["namespace"] = ns
    else:
        meta.pop("namespace", None)
    if not meta.get("name") and meta.get("generateName"):
        for _ in range(10):
            meta["name"] = meta["generateName"] + cluster.random_suffix()
            if cluster.store.get(rt.key, ns if rt.namespaced else "", meta["name"]) is None:
                break
    return meta


# Kinds without a spec the server tracks generations of.
_NO_GENERATION = frozenset(
    {
        "pods",
        "events",
        "namespaces",
        "nodes",
        "configmaps",
        "secrets",
        "services",
        "serviceaccounts",
        "resourcequotas",
        "limitranges",
    }
)


def _stamp_new(
    cluster: Cluster,
    rt: ResourceType,
    obj: Obj,
    requested: Obj,
    *,
    manager: str | None,
    applied: bool,
) -> None:
    """What the server sets on a new object: uid, creation time, managed fields (the
    request's fields, the manager's) and generation 1; what the client sent of them goes."""
    meta = obj["metadata"]
    for field in (
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    ):
        meta.pop(field, None)
    meta["uid"] = cluster.new_uid()
    meta["creationTimestamp"] = cluster.timestamp()
    if manager and applied:
        meta["managedFields"] = ssa.apply(
            None,
            obj,
            requested,
            manager=manager,
            force=True,
            api_version=rt.api_version,
            ts=meta["creationTimestamp"],
        )
    elif manager:
        meta["managedFields"] = ssa.update(
            None,
            requested,
            manager=manager,
            api_version=rt.api_version,
            ts=meta["creationTimestamp"],
        )
    if rt.plural not in _NO_GENERATION:
        meta["generation"] = 1


def get(cluster: Cluster, rt: ResourceType, ns: str, name: str) -> Obj:
    obj = cluster.store.get(rt.key, ns if rt.namespaced else "", name)
    if obj is None:
        raise not_found(rt.plural, rt.group, name)
    return obj


def _spec_changed(old: Obj, new: Obj) -> bool:
    return any(old.get(k) != new.get(k) for k in ("spec", "value", "preemptionPolicy", "data"))


def update(
    cluster: Cluster,
    rt: ResourceType,
    ns: str,
    name: str,
    body: Any,
    *,
    field_validation: str = "Warn",
    status_only: bool = False,
    check_schema: bool = True,
    manager: str | None = None,
    managed_fields: list[Obj] | None = None,
) -> tuple[Obj, list[str]]:
    """PUT: optimistic concurrency on ``resourceVersion``; spec changes bump ``generation``.

    ``managedFields``: ``managed_fields`` when given (server-side apply computed them), else
    the fields ``manager`` changed become its own; writes without a manager (the
    sandbox's controllers) leave them as they were."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request was in an unknown format")
    old = get(cluster, rt, ns, name)
    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    if meta.get("name", name) != name:
        raise bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name "
            f"on the URL ({name})"
        )
    rv = meta.get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise conflict(rt.plural, rt.group, name)
    obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
    warnings = validation.check_schema(rt, obj, field_validation) if check_schema else []
    for field in _SERVER_OWNED:
        if field in old["metadata"]:
            meta[field] = old["metadata"][field]
        else:
            meta.pop(field, None)
    if status_only:
        new = copy.deepcopy(old)
        new["status"] = obj.get("status", {})
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return cluster.store.put(rt.key, new), warnings
    # The main resource ignores status, as on a real server with a status subresource.
    if "status" in old and rt.plural not in ("namespaces",):
        obj["status"] = copy.deepcopy(old["status"])
    if rt.plural == "namespaces":
        obj["spec"], obj["status"] = old.get("spec"), old.get("status")
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    defaults.apply_defaults(rt, obj)
    if rt.plural == "pods":
        _check_pod_update(name, obj, old)
    if rt.plural == "jobs":
        _keep_job_selector(obj, old)
    validation.validate_object(rt, obj, old)
    if rt.plural == "resourcequotas":
        obj["status"] = _quota_status(cluster, ns, obj)
    if "generation" in meta and _spec_changed(old, obj):
        meta["generation"] = int(meta["generation"]) + 1
    if managed_fields is not None:
        meta["managedFields"] = managed_fields
    elif manager:
        meta["managedFields"] = ssa.update(
            old, obj, manager=manager, api_version=rt.api_version, ts=cluster.timestamp()
        )
    elif "managedFields" in old["metadata"]:
        meta["managedFields"] = old["metadata"]["managedFields"]
    else:
        meta.pop("managedFields", None)
    if obj == old:
        return old, warnings
    stored = cluster.store.put(rt.key, obj)
    if rt.key == crds.CRD_KEY and not status_only:
        crds.register(stored)
    return stored, warnings


# Metadata only the server sets: an update keeps the stored values.
_SERVER_OWNED = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def _check_pod_update(name: str, obj: Obj, old: Obj) -> None:
    """A pod's spec is immutable but for a few fields (422 as the API server words it)."""
    if obj.get("spec") == old.get("spec"):
        return
    allowed: tuple[str, ...] = ("activeDeadlineSeconds", "tolerations")
    if old["spec"].get("schedulingGates"):
        # A gated pod's placement may still be narrowed, and its gates removed.
        allowed += ("nodeSelector", "affinity", "schedulingGates")
    if {k: v for k, v in obj["spec"].items() if k not in allowed} != {
        k: v for k, v in old["spec"].items() if k not in allowed
    }:
        raise ApiError(
            422,
            "Invalid",
            f'Pod "{name}" is invalid: spec: Forbidden: pod '
            "updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
            "`spec.tolerations` (only additions to existing tolerations),"
            "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
            "was previously negative)",
            {
                "name": name,
                "kind": "Pod",
                "causes": [
                    {
                        "reason": "FieldValueForbidden",
                        "message": "Forbidden: pod updates may not change fields other than ...",
                        "field": "spec",
                    }
                ],
            },
        )


def _keep_job_selector(obj: Obj, old: Obj) -> None:
    """A Job's selector and generated labels are immutable; keep them when a client drops
    them."""
    obj["spec"]["selector"] = old["spec"].get("selector")
    obj["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update(
        {
            k: v
            for k, v in old["spec"]["template"]["metadata"].get("labels", {}).items()
            if k in JOB_LABELS
        }
    )


def _quota_status(cluster: Cluster, ns: str, obj: Obj) -> Obj:
    """A ResourceQuota's status recomputed for its new hard limits."""
    hard = dict((obj.get("spec") or {}).get("hard") or {})
    used = admission.quota_used(cluster, ns, hard)
    return {"hard": hard, "used": {k: admission.fmt(k, v, hard[k]) for k, v in used.items()}}


PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


def patch(
    cluster: Cluster,
    rt: ResourceType,
    ns: str,
    name: str,
    raw: bytes,
    content_type: str,
    *,
    field_validation: str = "Warn",
    status_only: bool = False,
    manager: str | None = None,
    force: bool = False,
) -> tuple[Obj, list[str]]:
    ctype = content_type.split(";")[0].strip()
    if ctype not in PATCH_TYPES:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media "
            f"types include: {', '.join(PATCH_TYPES)}",
        )
    try:
        body = yaml.safe_load(raw) if ctype.endswith("yaml") else json.loads(raw or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding patch: {exc}") from None
    key_ns = ns if rt.namespaced else ""
    old = cluster.store.get(rt.key, key_ns, name)
    applying = ctype == "application/apply-patch+yaml"
    if applying and not manager:
        raise bad_request(
            "PATCH /apply requests require a fieldManager: set it with the fieldManager "
            "query parameter"
        )
    if old is None:
        if applying:  # server-side apply creates
            return create(
                cluster, rt, ns, body, field_validation=field_validation, manager=manager,
                applied=True,
            )  # fmt: skip
        raise not_found(rt.plural, rt.group, name)
    current = copy.deepcopy(old)
    if ctype == "application/json-patch+json":
        new = json_patch(current, body)
    elif ctype == "application/merge-patch+json" or ctype.endswith("yaml"):
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        new = merge_patch(current, body)
    else:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        new = strategic_merge_patch(current, body)
    if not isinstance(new, dict):
        raise bad_request("the patch did not produce an object")
    if status_only:
        return update(cluster, rt, ns, name, new, status_only=True, check_schema=False)
    # A patch need not carry resourceVersion; when it does, it is a precondition.
    patched_rv = (
        (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
    )
    new.setdefault("metadata", {})["resourceVersion"] = (
        patched_rv or old["metadata"]["resourceVersion"]
    )
    if applying:
        managed = ssa.apply(
            old,
            new,
            body,
            manager=str(manager),
            force=force,
            api_version=rt.api_version,
            ts=cluster.timestamp(),
        )
        return update(
            cluster, rt, ns, name, new, field_validation=field_validation, managed_fields=managed
        )
    return update(cluster, rt, ns, name, new, field_validation=field_validation, manager=manager)


# -- list ------------------------------------------------------------------------------------
def _encode_continue(rv: str, after: tuple[str, str], now: float) -> str:
    payload = {
        "v": "meta.k8s.io/v1",
        "rv": int(rv),
        "start": f"{after[0]}/{after[1]}\x00",
        "t": now,
    }
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def _decode_continue(token: str) -> dict[str, Any]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(data, dict) or "start" not in data:
            raise ValueError
        return data
    except (ValueError, TypeError):
        raise bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion "
            "(version meta.k8s.io/v1)"
        ) from None


def _select(
    cluster: Cluster, rt: ResourceType, ns: str | None, query: dict[str, str]
) -> tuple[list[tuple[str, Obj]], dict[str, Any]]:
    """One page of matching ``(key, object)`` pairs and the list's metadata."""
    label_reqs = parse_label_selector(query.get("labelSelector", ""))
    field_reqs = parse_field_selector(query.get("fieldSelector", ""), rt.key)
    # etcd order: the API server lists (and continues) by the key string "<ns>/<name>".
    keyed = cluster.store.keyed(rt.key, ns if rt.namespaced else None)
    token = query.get("continue")
    first = 0
    if token:
        data = _decode_continue(token)
        if cluster.now() - float(data.get("t", 0)) > cluster.options.continue_ttl:
            raise expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter, or use the continue "
                "token in this response to retrieve the remainder of the results. Continuing "
                "with the provided token results in an inconsistent list - objects that were "
                "created, modified, or deleted between the time the first chunk was returned "
                "and now may show up in the list."
            )
        after = str(data["start"]).rstrip("\x00")
        first = bisect.bisect_right(keyed, after, key=lambda pair: pair[0])
    limit = int(query.get("limit") or 0)
    selected: list[tuple[str, Obj]] = []
    more = False
    position = first
    for position in range(first, len(keyed)):  # position is read after the loop
        pair = keyed[position]
        obj = pair[1]
        if label_reqs and not labels_match(label_reqs, obj["metadata"].get("labels") or {}):
            continue
        if field_reqs and not fields_match(field_reqs, obj):
            continue
        if limit > 0 and len(selected) == limit:
            more = True  # one match past the page: there is a next page
            break
        selected.append(pair)
    list_meta: dict[str, Any] = {"resourceVersion": cluster.store.current_rv()}
    if more:
        last = selected[-1][1]["metadata"]
        list_meta["continue"] = _encode_continue(
            cluster.store.current_rv(), (last.get("namespace", ""), last["name"]), cluster.now()
        )
        if not label_reqs and not field_reqs:
            list_meta["remainingItemCount"] = len(keyed) - position
    return selected, list_meta


def list_objects(cluster: Cluster, rt: ResourceType, ns: str | None, query: dict[str, str]) -> Obj:
    """A ``<Kind>List`` as a dict. A built-in type's items carry no ``apiVersion``/``kind``,
    as served; a custom resource's keep them (the API server stores and lists them as
    unstructured objects, and clients such as Kubeflow's SDK read each item's ``kind``)."""
    selected, list_meta = _select(cluster, rt, ns, query)
    custom = rt.key in crds.SERVED
    out_items = []
    for _, obj in selected:
        item = dict(obj)
        if not custom:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        out_items.append(item)
    return {
        "kind": f"{rt.kind}List",
        "apiVersion": rt.api_version,
        "metadata": list_meta,
        "items": out_items,
    }


def list_encoded(
    cluster: Cluster, rt: ResourceType, ns: str | None, query: dict[str, str]
) -> bytes:
    """The same list as JSON bytes, items taken from the store's per-object encodings.

    A page of 500 pods is a megabyte or two of JSON; encoding only the objects that changed
    since they were last served (as the API server's watch cache does) is what keeps a
    paginated LIST of 10,000 pods cheap.
    """
    selected, list_meta = _select(cluster, rt, ns, query)
    head = json.dumps(
        {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": list_meta},
        separators=(",", ":"),
    ).encode()
    custom = rt.key in crds.SERVED
    items = b",".join(
        cluster.store.encoded_item(rt.key, key, obj, custom=custom) for key, obj in selected
    )
    return head[:-1] + b',"items":[' + items + b"]}"


# -- delete ----------------------------------------------------------------------------------
def dependents(cluster: Cluster, owner_uid: str) -> list[tuple[ResourceType, Obj]]:
    out = []
    for rt in RESOURCES:
        if rt.plural in ("events", "nodes", "namespaces"):
            continue
        for obj in cluster.store.iter(rt.key):
            refs = obj["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == owner_uid for r in refs):
                out.append((rt, obj))
    return out


def _status_success(rt: ResourceType, obj: Obj) -> Obj:
    details: dict[str, Any] = {"name": obj["metadata"]["name"]}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details["uid"] = obj["metadata"].get("uid", "")
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def delete(
    cluster: Cluster,
    rt: ResourceType,
    ns: str,
    name: str,
    options: dict[str, Any],
) -> tuple[Obj, list[str]]:
    """DELETE with ``propagationPolicy`` and ``gracePeriodSeconds``.

    batch/v1 Jobs still orphan their pods when no policy is given (a legacy default the
    API server warns about); apps/v1 objects default to Background.
    """
    obj = get(cluster, rt, ns, name)
    meta = obj["metadata"]
    key_ns = ns if rt.namespaced else ""
    _check_preconditions(rt, name, meta, options.get("preconditions") or {})
    policy, warnings = _propagation_policy(rt, options)
    if rt.plural == "namespaces":
        return _delete_namespace(cluster, rt, name, obj), warnings
    if rt.plural == "pods":
        _delete_pod(cluster, rt, obj, options.get("gracePeriodSeconds"))
        return obj, warnings
    if policy == "Orphan":
        _orphan_dependents(cluster, meta["uid"])
    if policy == "Foreground" and dependents(cluster, meta["uid"]):
        if meta.get("deletionTimestamp") is None:
            meta["deletionTimestamp"] = cluster.timestamp()
            meta["deletionGracePeriodSeconds"] = 0
            meta.setdefault("finalizers", [])
            if "foregroundDeletion" not in meta["finalizers"]:
                meta["finalizers"].append("foregroundDeletion")
            cluster.store.put(rt.key, obj)
        return obj, warnings
    cluster.store.delete(rt.key, key_ns, name)
    if rt.key == crds.CRD_KEY:
        _delete_custom_objects(cluster, obj)
    if rt.plural == "persistentvolumeclaims":
        cluster.servers.claim_deleted(ns, name)  # its volume goes (reclaim policy Delete)
    return _status_success(rt, obj), warnings


def _delete_custom_objects(cluster: Cluster, crd: Obj) -> None:
    """A deleted CRD takes its objects with it, and its types stop being served."""
    spec = crd.get("spec") or {}
    key = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
    for obj in list(cluster.store.list(key, None)):
        meta = obj["metadata"]
        cluster.store.delete(key, meta.get("namespace", ""), meta["name"])
    crds.unregister(crd)


def _check_preconditions(rt: ResourceType, name: str, meta: Obj, pre: dict[str, Any]) -> None:
    """DeleteOptions' preconditions: the uid and resourceVersion the client expects (409)."""
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise ApiError(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {pre['uid']}, "
            f"UID in object meta: {meta.get('uid')}",
            {"name": name, "kind": rt.plural},
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        raise ApiError(
            409,
            "Conflict",
            "Precondition failed: ResourceVersion in precondition: "
            f"{pre['resourceVersion']}, ResourceVersion in object meta: "
            f"{meta.get('resourceVersion')}",
            {"name": name, "kind": rt.plural},
        )


def _propagation_policy(rt: ResourceType, options: dict[str, Any]) -> tuple[str, list[str]]:
    """The propagation policy a delete follows, with the warning of a Job's legacy default
    (its pods orphaned when the client names none)."""
    warnings: list[str] = []
    policy = options.get("propagationPolicy")
    if options.get("orphanDependents") is True:
        policy = "Orphan"
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise ApiError(
            422,
            "Invalid",
            f'DeleteOptions.meta.k8s.io "" is invalid: '
            f'propagationPolicy: Unsupported value: "{policy}": supported values: '
            '"Foreground", "Background", "Orphan", "nil"',
        )
    if policy is None and rt.plural == "jobs":
        policy = "Orphan"
        warnings.append(
            "child pods are preserved by default when jobs are deleted; set "
            "propagationPolicy=Background to remove them or set "
            "propagationPolicy=Orphan to suppress this warning"
        )
    return policy or "Background", warnings


def _delete_namespace(cluster: Cluster, rt: ResourceType, name: str, obj: Obj) -> Obj:
    """A namespace is marked Terminating; the namespace controller empties and removes it."""
    meta = obj["metadata"]
    if name in PROTECTED_NAMESPACES:
        raise forbidden("namespaces", "", name, "this namespace may not be deleted")
    if meta.get("deletionTimestamp") is None:
        meta["deletionTimestamp"] = cluster.timestamp()
        meta["deletionGracePeriodSeconds"] = 0
        obj["status"] = {"phase": "Terminating"}
        cluster.store.put(rt.key, obj)
    return obj


def _delete_pod(cluster: Cluster, rt: ResourceType, obj: Obj, grace: Any) -> None:
    """A running pod gets its grace period (the kubelet stops it, then it goes); any other
    pod, or a grace period of 0, goes at once and releases what it held."""
    meta = obj["metadata"]
    if grace is None:
        grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
    grace = int(grace)
    running = obj["spec"].get("nodeName") and obj.get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )
    if running and grace > 0:
        if meta.get("deletionTimestamp") is None:
            meta["deletionTimestamp"] = cluster.timestamp()
            meta["deletionGracePeriodSeconds"] = grace
            cluster.store.put(rt.key, obj)
        return
    cluster.store.delete(rt.key, meta["namespace"], meta["name"])
    release_pod(cluster, obj)


def _orphan_dependents(cluster: Cluster, uid: str) -> None:
    """The objects the deleted one owned lose their owner reference to it."""
    for drt, dep in dependents(cluster, uid):
        refs = [r for r in dep["metadata"].get("ownerReferences", []) if r.get("uid") != uid]
        if refs:
            dep["metadata"]["ownerReferences"] = refs
        else:
            dep["metadata"].pop("ownerReferences", None)
        cluster.store.put(drt.key, dep)


def release_pod(cluster: Cluster, pod: Obj) -> None:
    """Hand the pod's GPUs back; done when the pod object is finally removed."""
    release_devices(cluster, pod)
    cluster.store.meta_delete(f"life/{pod['metadata'].get('uid', '')}")
