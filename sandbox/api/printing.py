"""Server-side printing: ``meta.k8s.io/v1`` Tables, as ``kubectl get`` asks for them
(``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``).

The columns and cell texts follow the API server's printers
(``pkg/printers/internalversion/printers.go``): a column of priority 1 shows only with
``-o wide``. Ages are Kubernetes' ``duration.HumanDuration`` of the time since the
object's timestamp, on the server's clock, so they read as on a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox.api import crds
from sandbox.api.resources import ResourceType
from sandbox.clock import parse_rfc3339

Obj = dict[str, Any]
Column = tuple[str, str, str, int]  # name, type, format, priority
Printer = tuple[list[Column], Callable[[Obj, float], list[Any]]]


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _since(timestamp: str | None, now: float) -> str:
    if not timestamp:
        return "<unknown>"
    return human_duration(now - parse_rfc3339(timestamp))


def _custom_cells(found: Any, obj: Obj, now: float) -> list[Any]:
    """A custom resource's printer columns; a ``date`` column shows the time since, as the
    API server's CRD table converter writes it (kubectl prints ``AGE 5m``, not a date)."""
    cells = crds.cells(found, obj)
    for index, (_, kind, _, _) in enumerate(crds.columns(found)):
        if kind == "date" and isinstance(cells[index], str) and cells[index]:
            cells[index] = _since(cells[index], now)
    return cells


def _age(obj: Obj, now: float) -> str:
    return _since(obj["metadata"].get("creationTimestamp"), now)


NAME: Column = ("Name", "string", "name", 0)
AGE: Column = ("Age", "string", "", 0)
# What ``-o wide`` adds for every workload kind (Job, Deployment, ReplicaSet).
WORKLOAD_WIDE: list[Column] = [
    ("Containers", "string", "", 1),
    ("Images", "string", "", 1),
    ("Selector", "string", "", 1),
]


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


# --- per kind -------------------------------------------------------------------------------


def _pod(obj: Obj, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    ready = restarts = 0
    for cs in status.get("containerStatuses") or []:
        restarts += int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            term = state["terminated"]
            reason = term.get("reason") or ("Completed" if term.get("exitCode") == 0 else "Error")
        elif "running" in state and cs.get("ready"):
            ready += 1
    if status.get("phase") == "Running" and reason in ("Completed", "Error") and ready:
        reason = "Running"
    if obj["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    containers = len(spec.get("containers") or [])
    return [
        obj["metadata"]["name"],
        f"{ready}/{containers}",
        reason,
        str(restarts),
        _age(obj, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


POD: Printer = (
    [
        NAME,
        ("Ready", "string", "", 0),
        ("Status", "string", "", 0),
        ("Restarts", "string", "", 0),
        AGE,
        ("IP", "string", "", 1),
        ("Node", "string", "", 1),
        ("Nominated Node", "string", "", 1),
        ("Readiness Gates", "string", "", 1),
    ],
    _pod,
)


def _node(obj: Obj, now: float) -> list[Any]:
    status, labels = obj.get("status") or {}, obj["metadata"].get("labels") or {}
    ready = _condition(obj, "Ready")
    state = "Ready" if ready else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix) and k != prefix)
    info = status.get("nodeInfo") or {}
    internal = next(
        (a["address"] for a in status.get("addresses") or [] if a.get("type") == "InternalIP"),
        "<none>",
    )
    return [
        obj["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        _age(obj, now),
        info.get("kubeletVersion", ""),
        internal,
        "<none>",
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


NODE: Printer = (
    [
        NAME,
        ("Status", "string", "", 0),
        ("Roles", "string", "", 0),
        AGE,
        ("Version", "string", "", 0),
        ("Internal-IP", "string", "", 1),
        ("External-IP", "string", "", 1),
        ("OS-Image", "string", "", 1),
        ("Kernel-Version", "string", "", 1),
        ("Container-Runtime", "string", "", 1),
    ],
    _node,
)


def _containers(template: Obj) -> tuple[str, str]:
    containers = ((template.get("spec") or {}).get("containers")) or []
    return (
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
    )


def _selector(spec: Obj) -> str:
    labels = (spec.get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def _job(obj: Obj, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if _condition(obj, "Complete"):
        state = "Complete"
    elif _condition(obj, "Failed"):
        state = "Failed"
    elif _condition(obj, "Suspended"):
        state = "Suspended"
    elif _condition(obj, "FailureTarget"):
        state = "FailureTarget"
    elif _condition(obj, "SuccessCriteriaMet"):
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    else:
        parallelism = int(spec.get("parallelism") or 1)
        completions = f"{succeeded}/1" + (f" of {parallelism}" if parallelism > 1 else "")
    duration = ""
    if status.get("startTime"):
        end = parse_rfc3339(status["completionTime"]) if status.get("completionTime") else now
        duration = human_duration(end - parse_rfc3339(status["startTime"]))
    names, images = _containers(spec.get("template") or {})
    return [
        obj["metadata"]["name"],
        state,
        completions,
        duration,
        _age(obj, now),
        names,
        images,
        _selector(spec),
    ]


JOB: Printer = (
    [
        NAME,
        ("Status", "string", "", 0),
        ("Completions", "string", "", 0),
        ("Duration", "string", "", 0),
        AGE,
        *WORKLOAD_WIDE,
    ],
    _job,
)


def _deployment(obj: Obj, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    return [
        obj["metadata"]["name"],
        f"{int(status.get('readyReplicas') or 0)}/{int(spec.get('replicas', 1))}",
        int(status.get("updatedReplicas") or 0),
        int(status.get("availableReplicas") or 0),
        _age(obj, now),
        names,
        images,
        _selector(spec),
    ]


DEPLOYMENT: Printer = (
    [
        NAME,
        ("Ready", "string", "", 0),
        ("Up-to-date", "string", "", 0),
        ("Available", "string", "", 0),
        AGE,
        *WORKLOAD_WIDE,
    ],
    _deployment,
)


def _replicaset(obj: Obj, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    return [
        obj["metadata"]["name"],
        int(spec.get("replicas", 1)),
        int(status.get("replicas") or 0),
        int(status.get("readyReplicas") or 0),
        _age(obj, now),
        names,
        images,
        _selector(spec),
    ]


REPLICASET: Printer = (
    [
        NAME,
        ("Desired", "integer", "", 0),
        ("Current", "integer", "", 0),
        ("Ready", "integer", "", 0),
        AGE,
        *WORKLOAD_WIDE,
    ],
    _replicaset,
)


def _daemonset(obj: Obj, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return [
        obj["metadata"]["name"],
        int(status.get("desiredNumberScheduled") or 0),
        int(status.get("currentNumberScheduled") or 0),
        int(status.get("numberReady") or 0),
        int(status.get("updatedNumberScheduled") or 0),
        int(status.get("numberAvailable") or 0),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
        _age(obj, now),
        names,
        images,
        _selector(spec),
    ]


DAEMONSET: Printer = (
    [
        NAME,
        ("Desired", "integer", "", 0),
        ("Current", "integer", "", 0),
        ("Ready", "integer", "", 0),
        ("Up-to-date", "integer", "", 0),
        ("Available", "integer", "", 0),
        ("Node Selector", "string", "", 0),
        AGE,
        *WORKLOAD_WIDE,
    ],
    _daemonset,
)


def _event(obj: Obj, now: float) -> list[Any]:
    involved = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or obj.get("firstTimestamp")
    first = obj.get("firstTimestamp") or obj.get("eventTime")
    source = obj.get("source") or {}
    return [
        _since(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        ", ".join(v for v in (source.get("component"), source.get("host")) if v)
        or obj.get("reportingComponent", ""),
        obj.get("message", ""),
        _since(first, now),
        int(obj.get("count") or 1),
        obj["metadata"]["name"],
    ]


EVENT: Printer = (
    [
        ("Last Seen", "string", "", 0),
        ("Type", "string", "", 0),
        ("Reason", "string", "", 0),
        ("Object", "string", "", 0),
        ("Subobject", "string", "", 1),
        ("Source", "string", "", 1),
        ("Message", "string", "", 0),
        ("First Seen", "string", "", 1),
        ("Count", "string", "", 1),
        ("Name", "string", "", 1),
    ],
    _event,
)


def _namespace(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        (obj.get("status") or {}).get("phase", "Active"),
        _age(obj, now),
    ]


def _quota_pairs(obj: Obj, limits: bool) -> str:
    hard = (obj.get("status") or {}).get("hard") or (obj.get("spec") or {}).get("hard") or {}
    used = (obj.get("status") or {}).get("used") or {}
    keys = sorted(k for k in hard if k.startswith("limits.") == limits)
    return ", ".join(f"{k}: {used.get(k, '0')}/{hard[k]}" for k in keys)


def _resource_quota(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        _age(obj, now),
        _quota_pairs(obj, limits=False),
        _quota_pairs(obj, limits=True),
    ]


def _label_selector(selector: dict[str, Any] | None) -> str:
    """``metav1.FormatLabelSelector``: ``a=b,c in (d)``, ``<none>`` for an empty one."""
    selector = selector or {}
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, values = expr.get("operator", ""), expr.get("values") or []
        if op in ("In", "NotIn"):
            parts.append(f"{expr.get('key')} {op.lower()} ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(expr.get("key")))
        else:
            parts.append(f"!{expr.get('key')}")
    return ",".join(parts) or "<none>"


def _network_policy(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        _label_selector((obj.get("spec") or {}).get("podSelector")),
        _age(obj, now),
    ]


def _priority_class(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        int(obj.get("value") or 0),
        bool(obj.get("globalDefault", False)),
        _age(obj, now),
        obj.get("preemptionPolicy", "PreemptLowerPriority"),
    ]


def _service(obj: Obj, now: float) -> list[Any]:
    spec = obj.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        obj["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        "<none>",
        ports or "<none>",
        _age(obj, now),
        selector or "<none>",
    ]


def _lease(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        (obj.get("spec") or {}).get("holderIdentity") or "",
        _age(obj, now),
    ]


def _config_map(obj: Obj, now: float) -> list[Any]:
    data = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [obj["metadata"]["name"], data, _age(obj, now)]


def _secret(obj: Obj, now: float) -> list[Any]:
    data = len(obj.get("data") or {}) + len(obj.get("stringData") or {})
    return [obj["metadata"]["name"], obj.get("type", "Opaque"), data, _age(obj, now)]


def _claim(obj: Obj, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        status.get("phase", "Pending"),
        spec.get("volumeName", ""),
        (status.get("capacity") or {}).get("storage", ""),
        ",".join(_ACCESS_MODES.get(m, m) for m in status.get("accessModes") or []),
        spec.get("storageClassName") or "<unset>",
        spec.get("volumeAttributesClassName") or "<unset>",
        _age(obj, now),
        spec.get("volumeMode", "Filesystem"),
    ]


_ACCESS_MODES = {
    "ReadWriteOnce": "RWO",
    "ReadOnlyMany": "ROX",
    "ReadWriteMany": "RWX",
    "ReadWriteOncePod": "RWOP",
}


def _service_account(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], len(obj.get("secrets") or []), _age(obj, now)]


def _default(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp", "")]


PRINTERS: dict[str, Printer] = {
    "Pod": POD,
    "Node": NODE,
    "Job": JOB,
    "Deployment": DEPLOYMENT,
    "ReplicaSet": REPLICASET,
    "DaemonSet": DAEMONSET,
    "Event": EVENT,
    "Namespace": ([NAME, ("Status", "string", "", 0), AGE], _namespace),
    "ResourceQuota": (
        [NAME, AGE, ("Request", "string", "", 0), ("Limit", "string", "", 0)],
        _resource_quota,
    ),
    "NetworkPolicy": (
        [NAME, ("Pod-Selector", "string", "", 0), AGE],
        _network_policy,
    ),
    "PriorityClass": (
        [
            NAME,
            ("Value", "integer", "", 0),
            ("Global-Default", "boolean", "", 0),
            AGE,
            ("Preemption-Policy", "string", "", 0),
        ],
        _priority_class,
    ),
    "Service": (
        [
            NAME,
            ("Type", "string", "", 0),
            ("Cluster-IP", "string", "", 0),
            ("External-IP", "string", "", 0),
            ("Port(s)", "string", "", 0),
            AGE,
            ("Selector", "string", "", 1),
        ],
        _service,
    ),
    "Lease": ([NAME, ("Holder", "string", "", 0), AGE], _lease),
    "ConfigMap": ([NAME, ("Data", "integer", "", 0), AGE], _config_map),
    "Secret": ([NAME, ("Type", "string", "", 0), ("Data", "integer", "", 0), AGE], _secret),
    "ServiceAccount": ([NAME, ("Secrets", "integer", "", 0), AGE], _service_account),
    "PersistentVolumeClaim": (
        [
            NAME,
            ("Status", "string", "", 0),
            ("Volume", "string", "", 0),
            ("Capacity", "string", "", 0),
            ("Access Modes", "string", "", 0),
            ("StorageClass", "string", "", 0),
            ("VolumeAttributesClass", "string", "", 0),
            AGE,
            ("VolumeMode", "string", "", 1),
        ],
        _claim,
    ),
}
DEFAULT: Printer = ([NAME, ("Created At", "date", "", 0)], _default)


def wants_table(accept: str) -> bool:
    """Whether the client asked for a Table first (kubectl lists it before plain JSON)."""
    first = accept.split(",")[0]
    return "as=Table" in first and "g=meta.k8s.io" in first


def table(
    rt: ResourceType, items: list[Obj], list_meta: Obj, *, now: float, include: str = "Metadata"
) -> Obj:
    """The ``Table`` of ``items``, ages counted to ``now``; ``include`` is the
    ``includeObject`` query parameter: ``Metadata`` (kubectl's default: a
    ``PartialObjectMetadata`` per row), ``Object`` or ``None``."""
    columns, row = PRINTERS.get(rt.kind, DEFAULT)
    custom = crds.served(rt)
    if custom is not None:
        columns, row = crds.columns(custom), lambda obj, now: _custom_cells(custom, obj, now)
    rows = []
    for obj in items:
        entry: Obj = {"cells": row(obj, now)}
        if include == "Object":
            entry["object"] = {"kind": rt.kind, "apiVersion": rt.api_version, **obj}
        elif include != "None":
            entry["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(entry)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {k: v for k, v in list_meta.items() if k in ("resourceVersion", "continue")},
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": fmt,
                "description": "",
                "priority": priority,
            }
            for name, kind, fmt, priority in columns
        ],
        "rows": rows,
    }
