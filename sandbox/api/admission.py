"""Admission plugins for pods, in the API server's order.

1. ``Priority``: ``priorityClassName`` → ``spec.priority`` / ``preemptionPolicy``.
2. ``DefaultTolerationSeconds``: not-ready/unreachable tolerations.
3. ``LimitRanger``: container defaults, then min/max.
4. ``PodSecurity``: the namespace's ``enforce`` level.
5. ``ResourceQuota``: every quota in the namespace, against live usage.

Each refusal is the 403 ``Forbidden`` the real plugin returns, so a Job controller that
hits one records it as a ``FailedCreate`` event, exactly as on a real cluster.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from sandbox import quantity
from sandbox.api import crds
from sandbox.errors import ApiError, forbidden
from sandbox.state import Cluster

Pod = dict[str, Any]
COMPUTE = ("cpu", "memory", "ephemeral-storage")


# -- 1. Priority --------------------------------------------------------------------------------
def admit_priority(cluster: Cluster, pod: Pod) -> None:
    spec = pod["spec"]
    name = pod["metadata"]["name"]
    class_name = spec.get("priorityClassName")
    classes = cluster.store.list("priorityclasses.scheduling.k8s.io")
    if class_name:
        pc = next((c for c in classes if c["metadata"]["name"] == class_name), None)
        if pc is None:
            raise forbidden("pods", "", name, f"no PriorityClass with name {class_name} was found")
    else:
        pc = next((c for c in classes if c.get("globalDefault")), None)
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
    value = int(pc.get("value", 0)) if pc else 0
    if spec.get("priority") is not None and spec["priority"] != value:
        raise forbidden(
            "pods",
            "",
            name,
            f"the integer value of priority ({spec['priority']}) must not be provided in pod "
            f"spec; priority admission controller computed {value} from the given "
            "PriorityClass name",
        )
    spec["priority"] = value
    policy = (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority"
    spec["preemptionPolicy"] = policy


# -- 2. DefaultTolerationSeconds --------------------------------------------------------------
def admit_default_tolerations(pod: Pod) -> None:
    tolerations = pod["spec"].setdefault("tolerations", [])
    keys = {t.get("key") for t in tolerations}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if key not in keys:
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )


# -- 3. LimitRanger ---------------------------------------------------------------------------
def admit_limit_ranges(cluster: Cluster, pod: Pod) -> None:
    ns = pod["metadata"]["namespace"]
    name = pod["metadata"]["name"]
    for lr in cluster.store.list("limitranges", ns):
        for limit in (lr.get("spec") or {}).get("limits") or []:
            if limit.get("type") != "Container":
                continue
            for container in pod["spec"].get("containers") or []:
                res = container.setdefault("resources", {})
                limits = res.setdefault("limits", {})
                requests = res.setdefault("requests", {})
                for rname, value in (limit.get("default") or {}).items():
                    limits.setdefault(rname, value)
                for rname, value in (limit.get("defaultRequest") or {}).items():
                    requests.setdefault(rname, value)
                for rname, value in (limit.get("max") or {}).items():
                    have = limits.get(rname)
                    if have is None or quantity.parse(have) > quantity.parse(value):
                        shown = (
                            f"but limit is {have}"
                            if have is not None
                            else "but no limit is specified"
                        )
                        raise forbidden(
                            "pods",
                            "",
                            name,
                            f"maximum {rname} usage per Container is {value}, {shown}",
                        )
                for rname, value in (limit.get("min") or {}).items():
                    have = requests.get(rname)
                    if have is None or quantity.parse(have) < quantity.parse(value):
                        shown = (
                            f"but request is {have}"
                            if have is not None
                            else "but no request is specified"
                        )
                        raise forbidden(
                            "pods",
                            "",
                            name,
                            f"minimum {rname} usage per Container is {value}, {shown}",
                        )
                if not limits:
                    res.pop("limits")
                if not requests:
                    res.pop("requests")


# -- 4. PodSecurity ---------------------------------------------------------------------------
_BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
_RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_SECCOMP_TYPES = ("RuntimeDefault", "Localhost")


def pod_security_violations(spec: dict[str, Any], level: str) -> list[str]:
    """Violations of the ``baseline`` / ``restricted`` Pod Security Standards, in PSA order:
    the baseline checks, then (for ``restricted``) the restricted ones."""
    if level not in ("baseline", "restricted"):
        return []
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    out = _baseline_violations(spec, containers)
    if level == "restricted":
        out += _restricted_violations(spec, containers)
    return out


def _who(names: list[str]) -> str:
    quoted = ", ".join(f'"{n}"' for n in names)
    return f"container {quoted}" if len(names) == 1 else f"containers {quoted}"


def _security_context(container: dict[str, Any]) -> dict[str, Any]:
    context: dict[str, Any] = container.get("securityContext") or {}
    return context


def _baseline_violations(spec: dict[str, Any], containers: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    host = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if host:
        out.append(f"host namespaces ({', '.join(host)})")
    privileged = [c["name"] for c in containers if _security_context(c).get("privileged")]
    if privileged:
        out.append(f"privileged ({_who(privileged)} must not set securityContext.privileged=true)")
    for c in containers:
        added = (_security_context(c).get("capabilities") or {}).get("add") or []
        bad = [a for a in added if a not in _BASELINE_CAPABILITIES]
        if bad:
            out.append(
                f"non-default capabilities ({_who([c['name']])} must not include "
                + ", ".join(f'"{b}"' for b in bad)
                + " in securityContext.capabilities.add)"
            )
    host_path = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_path:
        vols = ", ".join(f'"{v}"' for v in host_path)
        out.append(f"hostPath volumes (volume{'s' if len(host_path) > 1 else ''} {vols})")
    return out


def _restricted_violations(spec: dict[str, Any], containers: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    ape = [
        c["name"]
        for c in containers
        if _security_context(c).get("allowPrivilegeEscalation") is not False
    ]
    if ape:
        out.append(
            f"allowPrivilegeEscalation != false ({_who(ape)} must set "
            "securityContext.allowPrivilegeEscalation=false)"
        )
    restricted_vols = [
        v["name"]
        for v in spec.get("volumes") or []
        if not (set(v) - {"name"}) <= _RESTRICTED_VOLUME_TYPES
    ]
    if restricted_vols:
        out.append(
            f'restricted volume types (volume "{restricted_vols[0]}" uses restricted volume type)'
        )
    caps_missing = [
        c["name"]
        for c in containers
        if "ALL" not in ((_security_context(c).get("capabilities") or {}).get("drop") or [])
    ]
    if caps_missing:
        out.append(
            f"unrestricted capabilities ({_who(caps_missing)} must set "
            'securityContext.capabilities.drop=["ALL"])'
        )
    out += _user_violations(pod_sc, containers)
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type") in _SECCOMP_TYPES
    seccomp_missing = [
        c["name"]
        for c in containers
        if (_security_context(c).get("seccompProfile") or {}).get("type") not in _SECCOMP_TYPES
        and not pod_seccomp
    ]
    if seccomp_missing:
        out.append(
            f"seccompProfile (pod or {_who(seccomp_missing)} must set "
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
        )
    return out


def _user_violations(pod_sc: dict[str, Any], containers: list[dict[str, Any]]) -> list[str]:
    """runAsNonRoot (the pod's applies where a container sets none) and runAsUser=0."""
    out: list[str] = []
    pod_non_root = pod_sc.get("runAsNonRoot") is True
    non_root_missing = [
        c["name"]
        for c in containers
        if _security_context(c).get("runAsNonRoot") is not True
        and not (pod_non_root and _security_context(c).get("runAsNonRoot") is None)
    ]
    if non_root_missing:
        out.append(
            f"runAsNonRoot != true (pod or {_who(non_root_missing)} must set "
            "securityContext.runAsNonRoot=true)"
        )
    root_user = [c["name"] for c in containers if _security_context(c).get("runAsUser") == 0]
    if root_user or pod_sc.get("runAsUser") == 0:
        out.append(
            f"runAsUser=0 (pod and {_who(root_user)} must not set runAsUser=0)"
            if root_user
            else "runAsUser=0 (pod must not set runAsUser=0)"
        )
    return out


def namespace_psa(cluster: Cluster, ns: str, mode: str = "enforce") -> tuple[str, str]:
    obj = cluster.store.get("namespaces", "", ns) or {}
    labels = obj.get("metadata", {}).get("labels") or {}
    level = labels.get(f"pod-security.kubernetes.io/{mode}", "privileged")
    version = labels.get(f"pod-security.kubernetes.io/{mode}-version", "latest")
    return level, version


def admit_pod_security(cluster: Cluster, pod: Pod) -> None:
    level, version = namespace_psa(cluster, pod["metadata"]["namespace"])
    violations = pod_security_violations(pod["spec"], level)
    if violations:
        raise forbidden(
            "pods",
            "",
            pod["metadata"]["name"],
            f'violates PodSecurity "{level}:{version}": ' + ", ".join(violations),
        )


def workload_warnings(cluster: Cluster, ns: str, template_spec: dict[str, Any]) -> list[str]:
    """PSA only warns on Jobs/Deployments; their pods are refused later (FailedCreate)."""
    warnings: list[str] = []
    for mode in ("enforce", "warn"):
        level, version = namespace_psa(cluster, ns, mode)
        violations = pod_security_violations(template_spec, level)
        text = f'would violate PodSecurity "{level}:{version}": ' + ", ".join(violations)
        if violations and text not in warnings:
            warnings.append(text)
    return warnings


# -- 5. ResourceQuota -------------------------------------------------------------------------
_USAGE_CACHE: dict[str, dict[str, Decimal]] = {}
_USAGE_CACHE_MAX = 200_000


def pod_usage(pod: Pod) -> dict[str, Decimal]:
    """What one pod charges against a quota (``requests.*``, ``limits.*``, ``pods``).

    A pod's resources cannot change once it exists, so the quota controller's pass over
    every pod reuses the figure per uid instead of parsing every quantity again.
    """
    uid = (pod.get("metadata") or {}).get("uid")
    if uid and uid in _USAGE_CACHE:
        return dict(_USAGE_CACHE[uid])
    usage = _pod_usage(pod)
    if uid:
        if len(_USAGE_CACHE) >= _USAGE_CACHE_MAX:
            _USAGE_CACHE.clear()
        _USAGE_CACHE[uid] = dict(usage)
    return usage


def _pod_usage(pod: Pod) -> dict[str, Decimal]:
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    spec = pod.get("spec") or {}
    totals: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for container in spec.get("containers") or []:
        res = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for name, raw in (res.get(kind) or {}).items():
                totals[kind][name] = totals[kind].get(name, Decimal(0)) + quantity.parse(raw)
    for container in spec.get("initContainers") or []:
        res = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for name, raw in (res.get(kind) or {}).items():
                totals[kind][name] = max(totals[kind].get(name, Decimal(0)), quantity.parse(raw))
    for name, amount in totals["requests"].items():
        usage[f"requests.{name}"] = amount
        if name in COMPUTE:
            usage[name] = amount
    for name, amount in totals["limits"].items():
        if name in COMPUTE:
            usage[f"limits.{name}"] = amount
    return usage


def counts_for_quota(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def quota_used(cluster: Cluster, ns: str, hard: dict[str, Any]) -> dict[str, Decimal]:
    used = {key: Decimal(0) for key in hard}
    for pod in cluster.store.list("pods", ns):
        if not counts_for_quota(pod):
            continue
        for key, amount in pod_usage(pod).items():
            if key in used:
                used[key] += amount
    for key in hard:
        if key.startswith("count/") and key != "count/pods":
            res = key[len("count/") :]
            used[key] = Decimal(len(cluster.store.list(res, ns)))
        elif key in ("services", "configmaps", "secrets", "resourcequotas"):
            used[key] = Decimal(len(cluster.store.list(key, ns)))
    return used


def fmt(key: str, amount: Decimal, like: Any = None) -> str:
    binary = quantity.is_binary(like) or (key.endswith("memory") and like is None)
    return quantity.format_quantity(amount, binary=binary)


def admit_resource_quota(cluster: Cluster, pod: Pod) -> None:
    ns = pod["metadata"]["namespace"]
    name = pod["metadata"]["name"]
    usage = pod_usage(pod)
    for rq in cluster.store.list("resourcequotas", ns):
        hard = (rq.get("spec") or {}).get("hard") or {}
        if not hard:
            continue
        # A quota on cpu/memory requires every container to say how much it wants.
        missing = []
        for key in sorted(hard):
            base = key.split(".", 1)[1] if key.startswith(("requests.", "limits.")) else key
            if base in COMPUTE and key not in usage and key != "pods":
                missing.append(key)
        if missing:
            names = ",".join(c["name"] for c in pod["spec"].get("containers") or [])
            detail = "; ".join(f"{k} for: {names}" for k in missing)
            raise forbidden(
                "pods", "", name, f"failed quota: {rq['metadata']['name']}: must specify {detail}"
            )
        used = _quota_status_used(cluster, rq, hard)
        exceeded = sorted(
            key
            for key, amount in usage.items()
            if key in hard and used.get(key, Decimal(0)) + amount > quantity.parse(hard[key])
        )
        if exceeded:
            requested = ",".join(f"{k}={fmt(k, usage[k], hard[k])}" for k in exceeded)
            in_use = ",".join(f"{k}={fmt(k, used[k], hard[k])}" for k in exceeded)
            limited = ",".join(f"{k}={hard[k]}" for k in exceeded)
            raise forbidden(
                "pods",
                "",
                name,
                f"exceeded quota: {rq['metadata']['name']}, requested: {requested}, "
                f"used: {in_use}, limited: {limited}",
            )


def _quota_status_used(
    cluster: Cluster, rq: dict[str, Any], hard: dict[str, Any]
) -> dict[str, Decimal]:
    """What the quota already holds, from its ``status.used`` as the API server does.

    The quota admission plugin does not add up every pod of the namespace per request: it
    reads ``status.used`` (kept by the quota controller, here ``gc``) and charges each admitted
    pod into it (``quota_charge``). A status that lacks a key is computed from the pods once.
    """
    status_used = (rq.get("status") or {}).get("used") or {}
    if not all(key in status_used for key in hard):
        return quota_used(cluster, rq["metadata"]["namespace"], hard)
    return {key: quantity.parse(status_used[key]) for key in hard}


def quota_charge(cluster: Cluster, pod: Pod) -> None:
    """Add an admitted pod's usage to its namespace's quotas' ``status.used``."""
    if not counts_for_quota(pod):
        return
    usage = pod_usage(pod)
    for rq in cluster.store.list("resourcequotas", pod["metadata"]["namespace"]):
        hard = (rq.get("spec") or {}).get("hard") or {}
        if not hard or not any(key in hard for key in usage):
            continue
        used = _quota_status_used(cluster, rq, hard)
        for key, amount in usage.items():
            if key in used:
                used[key] += amount
        formatted = {k: fmt(k, v, hard[k]) for k, v in used.items()}
        rq["status"] = {"hard": dict(hard), "used": formatted}
        cluster.store.put("resourcequotas", rq)


def admit_pod(cluster: Cluster, pod: Pod) -> None:
    admit_priority(cluster, pod)
    admit_default_tolerations(pod)
    admit_limit_ranges(cluster, pod)
    admit_pod_security(cluster, pod)
    admit_resource_quota(cluster, pod)


def kueue_job_defaults(job: dict[str, Any]) -> None:
    """Kueue's Job webhook, when Kueue is installed: a Job for a queue
    (``kueue.x-k8s.io/queue-name``) is created suspended, and only Kueue unsuspends it."""
    labels = job["metadata"].get("labels") or {}
    if "kueue.x-k8s.io/queue-name" in labels and "workloads.kueue.x-k8s.io" in crds.SERVED:
        job["spec"]["suspend"] = True


KUEUE_GATE = "kueue.x-k8s.io/admission"


def kueue_pod_defaults(pod: dict[str, Any]) -> None:
    """Kueue's pod webhook (the pod integration, as Deployments use it), when Kueue is
    installed: a pod for a queue is gated until Kueue admits it."""
    labels = pod["metadata"].setdefault("labels", {})
    if "kueue.x-k8s.io/queue-name" not in labels or "workloads.kueue.x-k8s.io" not in crds.SERVED:
        return
    if pod["metadata"].get("namespace") == "kube-system":
        return
    labels["kueue.x-k8s.io/managed"] = "true"
    gates = pod["spec"].setdefault("schedulingGates", [])
    if not any(g.get("name") == KUEUE_GATE for g in gates):
        gates.append({"name": KUEUE_GATE})


def jobset_defaults(jobset: dict[str, Any]) -> None:
    """JobSet's mutating webhook (on create): the success and startup policies, Indexed
    child Jobs whose pods restart ``OnFailure``, DNS hostnames through a headless Service
    that publishes pods before they are ready."""
    spec = jobset.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for rjob in spec.get("replicatedJobs") or []:
        job = rjob.setdefault("template", {}).setdefault("spec", {})
        job.setdefault("completionMode", "Indexed")
        pod = job.setdefault("template", {}).setdefault("spec", {})
        if not pod.get("restartPolicy"):
            pod["restartPolicy"] = "OnFailure"


TRAINER_RESERVED_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)


def trainjob_admission(cluster: Cluster, trainjob: dict[str, Any]) -> None:
    """Trainer's TrainJob webhook (on create): its runtime must exist, and a torch runtime's
    trainer may not set torchrun's env, which the controller owns. Refusals read as the
    webhook's (``admission webhook "validate.trainjob.trainer.kubeflow.org" denied the
    request: …``)."""
    spec = trainjob.setdefault("spec", {})
    ref = spec.setdefault("runtimeRef", {})
    ref.setdefault("apiGroup", "trainer.kubeflow.org")
    ref.setdefault("kind", "ClusterTrainingRuntime")
    kind, name = ref["kind"], ref.get("name", "")
    if kind == "ClusterTrainingRuntime":
        runtime = cluster.store.get("clustertrainingruntimes.trainer.kubeflow.org", "", name)
        what = "clusterTrainingRuntime"
    else:
        ns = trainjob["metadata"]["namespace"]
        runtime = cluster.store.get("trainingruntimes.trainer.kubeflow.org", ns, name)
        what = "trainingRuntime"
    if runtime is None:
        _trainjob_denied(
            f"spec.RuntimeRef: Invalid value: {json.dumps(ref, sort_keys=True)}: "
            f'{what.lower()}s.trainer.kubeflow.org "{name}" not found: specified {what} must '
            "be created before the TrainJob is created"
        )
    assert runtime is not None
    torch = "torch" in ((runtime.get("spec") or {}).get("mlPolicy") or {})
    env = [e.get("name") for e in (spec.get("trainer") or {}).get("env") or []]
    reserved = [e for e in env if e in TRAINER_RESERVED_ENV]
    if torch and reserved:
        _trainjob_denied(
            "spec.trainer.env: Invalid value: "
            f"{json.dumps([{'name': e} for e in reserved])}: must not have reserved envs, "
            f"invalid envs configured: [{' '.join(reserved)}]"
        )
    kueue_trainjob_defaults(trainjob)


def kueue_trainjob_defaults(trainjob: dict[str, Any]) -> None:
    """Kueue's TrainJob webhook (Kueue ≥ 0.17), when Kueue is installed: a TrainJob for a
    queue is created suspended, and every TrainJob gets Kueue's (empty) runtime patch, which
    Kueue fills with each pod set's placement when it admits the job."""
    if "workloads.kueue.x-k8s.io" not in crds.SERVED:
        return
    spec = trainjob["spec"]
    if "kueue.x-k8s.io/queue-name" in (trainjob["metadata"].get("labels") or {}):
        spec["suspend"] = True
    patches = spec.setdefault("runtimePatches", [])
    if not any(p.get("manager") == "kueue.x-k8s.io/manager" for p in patches):
        patches.append(
            {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
        )


def _trainjob_denied(message: str) -> None:
    raise ApiError(
        422,
        "Invalid",
        f'admission webhook "validate.trainjob.trainer.kubeflow.org" denied the request: {message}',
    )
