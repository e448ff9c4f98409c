"""Kueue's controllers, for ``batch/v1`` Jobs: what a cluster with Kueue installed does.

1. A Job labelled ``kueue.x-k8s.io/queue-name`` is created suspended (the webhook,
   ``sandbox.api.admission.kueue_job_defaults``) and gets one Workload (``job-<name>-<hash>``,
   owned by the Job, labelled with its UID): one pod set ``main`` with the Job's parallelism
   and pod template, its priority from the template's PriorityClass.
2. Each pass admits what fits, per ClusterQueue in priority then creation order
   (``StrictFIFO``: a head that does not fit blocks the queue; ``BestEffortFIFO``: the next
   is tried): each resource group's flavors are tried in order, the first that fits, even
   by borrowing from the cohort, is taken (Kueue's default fungibility), quota arithmetic
   from ``scheduling.sharing``. Across ClusterQueues, heads that fit without borrowing go
   first, then borrowers by lowest weighted share of the cohort once admitted (Kueue with
   ``fairSharing.enable: true``), then priority, then age. Admission writes
   ``status.admission`` and the ``QuotaReserved`` and ``Admitted`` conditions with Kueue's
   words, then unsuspends the Job with the flavors' node labels and tolerations.
3. A workload that fits only on its ClusterQueue's nominal quota once others are evicted
   preempts, by the ClusterQueue's policy (``reclaimWithinCohort``, ``withinClusterQueue``):
   other queues' workloads first, lower priority first, most recently admitted first, the
   fewest; the victims get ``Evicted`` and ``Preempted`` with Kueue's message, their Jobs
   are suspended, and once their pods are gone they are requeued.
4. A Workload whose Job finished gets ``Finished`` with the Job's own message.
5. ClusterQueue and LocalQueue statuses: quota reserved and used per flavor (``borrowed``
   above nominal), workload counts, ``Active``.

The TrainJob integration (``trainer.kubeflow.org/trainjob``, Kueue ≥ 0.17): a TrainJob for
a queue is created suspended with Kueue's runtime patch (the webhook), gets a Workload
(``trainjob-<name>-<hash>``) with a pod set per replicated job of the JobSet its runtime
makes; admission writes the flavors' node labels, tolerations and the ``podset`` label into
that patch and unsuspends it; eviction suspends it (Trainer suspends its JobSet), and once
its Jobs have no active pods it is requeued and the patch emptied.

Simplified (``sandbox/README.md``): Jobs, TrainJobs and the pod integration (no JobSet);
no admission checks, topology, partial admission, fair-sharing preemption strategies or
hierarchical cohorts; the pending reason is ``Pending`` (Kueue 0.19's default).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sandbox.api import crds, objects
from sandbox.api.admission import KUEUE_GATE
from sandbox.api.resources import BY_KEY
from sandbox.controllers import trainjob as trainer
from sandbox.controllers.common import condition, get_condition, owner_ref, set_condition
from sandbox.label_selectors import match_label_selector_obj
from sandbox.state import Cluster
from scheduling import format_quantity, normalise_quantity, pod_requests
from scheduling.sharing import (
    Cohort,
    FitKind,
    ResourceQuota,
    Running,
    TeamShare,
    preemption_victims,
)

Obj = dict[str, Any]
GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOADS = "workloads.kueue.x-k8s.io"
CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
LOCAL_QUEUES = "localqueues.kueue.x-k8s.io"
FLAVORS = "resourceflavors.kueue.x-k8s.io"
COMPONENT = "kueue-admission"
TRAINJOBS = "trainjobs.trainer.kubeflow.org"
# What a Workload's owner is stored under, by kind (the integrations the sandbox runs).
OWNER_KEYS = {"Job": "jobs.batch", "TrainJob": TRAINJOBS, "Pod": "pods"}
# The runtime patch Kueue's TrainJob integration owns (Kueue ≥ 0.17, Trainer ≥ 2.2).
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
PODSET_LABEL = "kueue.x-k8s.io/podset"
REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
}


def installed() -> bool:
    return WORKLOADS in crds.SERVED


def workload_name(owner: Obj) -> str:
    """Kueue's name for a Job's, TrainJob's or Pod's Workload: ``job-<name>-``
    (``trainjob-``, ``pod-``) and 5 hex digits of a SHA-1 of the owner's kind, group, name
    and UID."""
    meta = owner["metadata"]
    kind = owner.get("kind", "Job")
    group = {"Job": "batch", "TrainJob": "trainer.kubeflow.org"}.get(kind, "")
    digest = hashlib.sha1(  # noqa: S324 - a name, not a secret: Kueue's own scheme
        f"{kind}\n{group}\n{meta['name']}\n{meta['uid']}".encode()
    ).hexdigest()[:5]
    return f"{kind.lower()}-{meta['name']}"[:247] + f"-{digest}"


def reconcile(cluster: Cluster) -> None:
    """One pass of Kueue's controllers, skipped while nothing they read has changed."""
    if not installed():
        return
    store = cluster.store
    if not store.count(LOCAL_QUEUES) and not store.count(WORKLOADS):
        # No queue yet: nothing can be admitted, and a pass would read every Job for
        # nothing (a labelled Job waits, suspended, for its queue to exist).
        return
    if cluster.settled.get("kueue") == {"": _inputs(cluster)}:
        return
    _sync_jobs(cluster)
    _sync_trainjobs(cluster)
    _sync_pods(cluster)
    _collect_orphans(cluster)
    _schedule(cluster)
    _write_queue_statuses(cluster)
    cluster.settled["kueue"] = {"": _inputs(cluster)}


def _inputs(cluster: Cluster) -> tuple[int, ...]:
    """The versions of what the controllers read (pods only once a LocalQueue exists: the
    kubelet updates them all the time, and without a queue no pod of Kueue's can run)."""
    store = cluster.store
    keys = ["jobs.batch", TRAINJOBS, WORKLOADS, CLUSTER_QUEUES, LOCAL_QUEUES, FLAVORS]
    if store.count(LOCAL_QUEUES):
        keys.append("pods")
    return tuple(store.version(key) for key in keys)


# -- 1. Jobs and their Workloads -------------------------------------------------------------
def _sync_jobs(cluster: Cluster) -> None:
    store = cluster.store
    for job in store.list("jobs.batch"):
        labels = job["metadata"].get("labels") or {}
        if QUEUE_LABEL not in labels or job["metadata"].get("deletionTimestamp"):
            continue
        ns = job["metadata"]["namespace"]
        workload = store.get(WORKLOADS, ns, workload_name(job))
        if workload is None:
            workload = _create_workload(cluster, job, labels[QUEUE_LABEL])
        before = copy.deepcopy(workload.get("status"))
        _follow_job(cluster, workload, job)
        if workload.get("status") != before:
            store.put(WORKLOADS, workload)


def _create_workload(cluster: Cluster, job: Obj, queue: str) -> Obj:
    spec = job["spec"]
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    count = min(parallelism, int(completions)) if completions is not None else parallelism
    return _new_workload(cluster, job, queue, spec["template"], count)


def _new_workload(
    cluster: Cluster,
    owner: Obj,
    queue: str,
    template: Obj,
    count: int,
    pod_sets: list[Obj] | None = None,
) -> Obj:
    """One pod set ``main`` of ``count`` pods (or the ``pod_sets`` given), its priority from
    the first pod set's PriorityClass."""
    job = owner
    pod_sets = pod_sets or [{"name": "main", "count": count, "template": copy.deepcopy(template)}]
    priority, ref = 0, None
    klass = (pod_sets[0]["template"].get("spec") or {}).get("priorityClassName")
    if klass:
        found = cluster.store.get("priorityclasses.scheduling.k8s.io", "", klass)
        priority = int(found["value"]) if found else 0
        ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": klass}
    meta = job["metadata"]
    workload: Obj = {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [owner_ref(job)],
            "uid": cluster.new_uid(),
            "creationTimestamp": cluster.timestamp(),
            "generation": 1,
        },
        "spec": {
            "podSets": pod_sets,
            "queueName": queue,
            "priority": priority,
            "active": True,
            **({"priorityClassRef": ref} if ref else {}),
        },
        "status": {},
    }
    stored = cluster.store.put(WORKLOADS, workload)
    cluster.record_event(
        job,
        "Normal",
        "CreatedWorkload",
        f"Created Workload: {meta['namespace']}/{workload_name(job)}",
        "kueue-job-controller",
    )
    return stored


def _finished_with(workload: Obj, owner: Obj, ts: str) -> bool:
    """The Workload is ``Finished`` (already, or now as its Job or TrainJob is: its
    ``Complete`` / ``Failed`` condition's message)."""
    if get_condition(workload, "Finished"):
        return True
    for kind, reason in (("Complete", "Succeeded"), ("Failed", "Failed")):
        done = get_condition(owner, kind)
        if done and done["status"] == "True":
            set_condition(
                workload, condition("Finished", "True", reason, done.get("message", ""), ts, None)
            )
            return True
    return False


def _follow_job(cluster: Cluster, workload: Obj, job: Obj) -> None:
    """Finished when the Job is; requeued once an evicted Job's pods are gone."""
    ts = cluster.timestamp()
    if _finished_with(workload, job, ts):
        return
    evicted = get_condition(workload, "Evicted")
    reserved = get_condition(workload, "QuotaReserved")
    if (
        evicted
        and evicted["status"] == "True"
        and reserved
        and reserved["status"] == "True"
        and not int((job.get("status") or {}).get("active", 0))
    ):
        _requeue(workload, evicted["message"], ts)


def _requeue(workload: Obj, message: str, ts: str) -> None:
    """An evicted workload whose pods are gone goes back to its queue, its eviction counted."""
    set_condition(workload, condition("Requeued", "True", "Preempted", message, ts, None))
    set_condition(workload, condition("QuotaReserved", "False", "Pending", message, ts, None))
    set_condition(
        workload,
        condition(
            "Admitted", "False", "NoReservation", "The workload has no reservation", ts, None
        ),
    )
    status = workload["status"]
    status.pop("admission", None)
    stats = status.setdefault("schedulingStats", {}).setdefault("evictions", [])
    entry = next((e for e in stats if e["reason"] == "Preempted"), None)
    if entry is None:
        stats.append({"reason": "Preempted", "underlyingCause": "", "count": 1})
    else:
        entry["count"] += 1


# -- 1b. TrainJobs (the ``trainer.kubeflow.org/trainjob`` integration) -------------------
def _sync_trainjobs(cluster: Cluster) -> None:
    """A TrainJob for a queue gets one Workload, a pod set per replicated job of the JobSet
    its runtime makes (``count`` = replicas × pods per Job); finished with it; requeued once
    an evicted one's pods are gone."""
    store = cluster.store
    if TRAINJOBS not in crds.SERVED:
        return
    for trainjob in store.list(TRAINJOBS):
        labels = trainjob["metadata"].get("labels") or {}
        if QUEUE_LABEL not in labels or trainjob["metadata"].get("deletionTimestamp"):
            continue
        ns = trainjob["metadata"]["namespace"]
        workload = store.get(WORKLOADS, ns, workload_name(trainjob))
        if workload is None:
            pod_sets = _trainjob_pod_sets(cluster, trainjob)
            if not pod_sets:
                continue  # its runtime is gone: Trainer says so on the TrainJob
            workload = _new_workload(cluster, trainjob, labels[QUEUE_LABEL], {}, 0, pod_sets)
        before = copy.deepcopy(workload.get("status"))
        _follow_trainjob(cluster, workload, trainjob)
        if workload.get("status") != before:
            store.put(WORKLOADS, workload)


def _trainjob_pod_sets(cluster: Cluster, trainjob: Obj) -> list[Obj]:
    _, runtime = trainer.runtime_of(cluster, trainjob)
    if runtime is None:
        return []
    jobset = trainer.build_jobset(trainjob, runtime)
    pod_sets = []
    for rjob in jobset["spec"].get("replicatedJobs") or []:
        job = (rjob.get("template") or {}).get("spec") or {}
        parallelism = int(job.get("parallelism", 1))
        completions = job.get("completions")
        per_job = min(parallelism, int(completions)) if completions is not None else parallelism
        pod_sets.append(
            {
                "name": rjob["name"],
                "count": int(rjob.get("replicas", 1)) * per_job,
                "template": copy.deepcopy(job.get("template") or {}),
            }
        )
    return pod_sets


def _follow_trainjob(cluster: Cluster, workload: Obj, trainjob: Obj) -> None:
    """The TrainJob integration's ``Finished`` and requeue (as ``_follow_job`` for Jobs);
    once requeued, Kueue's patch loses what the admission wrote."""
    ts = cluster.timestamp()
    if _finished_with(workload, trainjob, ts):
        return
    evicted = get_condition(workload, "Evicted")
    reserved = get_condition(workload, "QuotaReserved")
    active = sum(
        int(j.get("active", 0)) for j in (trainjob.get("status") or {}).get("jobsStatus") or []
    )
    if not (evicted and evicted["status"] == "True" and reserved and reserved["status"] == "True"):
        return
    if active or not trainjob["spec"].get("suspend"):
        return
    _requeue(workload, evicted["message"], ts)
    _kueue_patch(trainjob)["trainingRuntimeSpec"] = {"template": {"spec": {}}}
    cluster.store.put(TRAINJOBS, trainjob)


def _kueue_patch(trainjob: Obj) -> Obj:
    """The TrainJob's runtime patch of Kueue's manager (its webhook adds it on create)."""
    patches = trainjob["spec"].setdefault("runtimePatches", [])
    found = next((p for p in patches if p.get("manager") == KUEUE_MANAGER), None)
    if found is None:
        found = {"manager": KUEUE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
        patches.append(found)
    return found


def _start_trainjob(
    cluster: Cluster, trainjob: Obj, workload: Obj, assignment: _Assignment, snapshot: _Snapshot
) -> None:
    """Kueue's ``RunWithPodSetsInfo`` for a TrainJob: its patch gives each pod set's pods
    the flavors' node labels and tolerations and the ``kueue.x-k8s.io/podset`` label, then
    the TrainJob is unsuspended (Trainer then builds its JobSet again, running)."""
    node_labels, tolerations = _placement(assignment, snapshot)
    replicated_jobs = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        pod_spec: Obj = {}
        if node_labels:
            pod_spec["nodeSelector"] = dict(node_labels)
        if tolerations:
            pod_spec["tolerations"] = copy.deepcopy(tolerations)
        replicated_jobs.append(
            {
                "name": pod_set["name"],
                "template": {
                    "spec": {
                        "template": {
                            "metadata": {"labels": {PODSET_LABEL: pod_set["name"]}},
                            "spec": pod_spec,
                        }
                    }
                },
            }
        )
    _kueue_patch(trainjob)["trainingRuntimeSpec"] = {
        "template": {"spec": {"replicatedJobs": replicated_jobs}}
    }
    trainjob["spec"]["suspend"] = False
    cluster.store.put(TRAINJOBS, trainjob)
    cluster.record_event(
        trainjob,
        "Normal",
        "Started",
        f"Admitted by clusterQueue {assignment_queue(workload)}",
        "kueue-trainjob-controller",
    )


def _sync_pods(cluster: Cluster) -> None:
    """The pod integration: each gated pod of a queue gets its Workload; one that ended is
    finished."""
    store = cluster.store
    if not store.count(LOCAL_QUEUES):
        return
    for pod in store.list("pods"):
        labels = pod["metadata"].get("labels") or {}
        if labels.get("kueue.x-k8s.io/managed") != "true" or QUEUE_LABEL not in labels:
            continue
        ns = pod["metadata"]["namespace"]
        workload = store.get(WORKLOADS, ns, workload_name(pod))
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if workload is None:
            if phase in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
                continue
            template = {"metadata": {"labels": dict(labels)}, "spec": _gateless(pod["spec"])}
            workload = _new_workload(cluster, pod, labels[QUEUE_LABEL], template, 1)
        if phase in ("Succeeded", "Failed") and not get_condition(workload, "Finished"):
            reason = "Succeeded" if phase == "Succeeded" else "Failed"
            message = (pod.get("status") or {}).get("message", "")
            ts = cluster.timestamp()
            _set(cluster, workload, condition("Finished", "True", reason, message, ts, None))


def _gateless(spec: Obj) -> Obj:
    spec = copy.deepcopy(spec)
    spec.pop("schedulingGates", None)
    spec.pop("nodeName", None)
    return spec


def _collect_orphans(cluster: Cluster) -> None:
    """A Workload whose Job or Pod is gone goes too (Kueue's finalizer does this)."""
    store = cluster.store
    for workload in store.list(WORKLOADS):
        owner = next(iter(workload["metadata"].get("ownerReferences") or []), None)
        if owner is None:
            continue
        key = OWNER_KEYS.get(owner["kind"], "pods")
        found = store.get(key, workload["metadata"]["namespace"], owner["name"])
        if found is None or found["metadata"].get("uid") != owner.get("uid"):
            meta = workload["metadata"]
            store.delete(WORKLOADS, meta["namespace"], meta["name"])


# -- 2. Admission ----------------------------------------------------------------------------
@dataclass
class _Queue:
    obj: Obj
    name: str
    cohort: str
    strategy: str
    groups: list[tuple[list[str], list[tuple[str, dict[str, ResourceQuota]]]]]
    blocked: bool = False


@dataclass
class _Pending:
    workload: Obj
    queue: _Queue
    demand: dict[str, int]
    priority: int
    created: str


@dataclass
class _Snapshot:
    queues: dict[str, _Queue]
    cohorts: dict[str, Cohort]
    flavors: dict[str, Obj]
    admitted: list[tuple[Obj, _Queue, dict[str, int]]] = field(default_factory=list)


def _quota_key(flavor: str, resource: str) -> str:
    return f"{flavor}/{resource}"


def _queues(cluster: Cluster) -> dict[str, _Queue]:
    found = {}
    for cq in cluster.store.list(CLUSTER_QUEUES):
        spec = cq.get("spec") or {}
        groups = []
        for group in spec.get("resourceGroups") or []:
            flavors = []
            for flavor in group.get("flavors") or []:
                quotas = {}
                for res in flavor.get("resources") or []:
                    name = res["name"]
                    limits = [
                        None if res.get(k) is None else normalise_quantity(name, res[k])
                        for k in ("borrowingLimit", "lendingLimit")
                    ]
                    quotas[name] = ResourceQuota(
                        normalise_quantity(name, res["nominalQuota"]), limits[0], limits[1]
                    )
                flavors.append((flavor["name"], quotas))
            groups.append((list(group.get("coveredResources") or []), flavors))
        name = cq["metadata"]["name"]
        found[name] = _Queue(
            cq,
            name,
            spec.get("cohortName") or f"/{name}",
            spec.get("queueingStrategy", "BestEffortFIFO"),
            groups,
        )
    return found


def _admitted_usage(workload: Obj) -> dict[str, int]:
    usage: dict[str, int] = {}
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get(
        "podSetAssignments"
    ) or []:
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            flavor = (assignment.get("flavors") or {}).get(resource)
            if flavor:
                key = _quota_key(flavor, resource)
                usage[key] = usage.get(key, 0) + normalise_quantity(resource, amount)
    return usage


def _holds_quota(workload: Obj) -> bool:
    reserved = get_condition(workload, "QuotaReserved")
    finished = get_condition(workload, "Finished")
    return bool(reserved and reserved["status"] == "True" and not finished)


def _snapshot(cluster: Cluster) -> _Snapshot:
    queues = _queues(cluster)
    usage: dict[str, dict[str, int]] = {name: {} for name in queues}
    admitted = []
    for workload in cluster.store.list(WORKLOADS):
        cq = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if cq in queues and _holds_quota(workload):
            held = _admitted_usage(workload)
            for key, amount in held.items():
                usage[cq][key] = usage[cq].get(key, 0) + amount
            admitted.append((workload, queues[cq], held))
    members: dict[str, dict[str, TeamShare]] = {}
    for name, queue in queues.items():
        quotas = {
            _quota_key(flavor, res): quota
            for _, flavors in queue.groups
            for flavor, resources in flavors
            for res, quota in resources.items()
        }
        weight = float(((queue.obj.get("spec") or {}).get("fairSharing") or {}).get("weight", 1))
        members.setdefault(queue.cohort, {})[name] = TeamShare(quotas, usage[name], weight)
    cohorts = {name: Cohort(teams) for name, teams in members.items()}
    flavors = {f["metadata"]["name"]: f for f in cluster.store.list(FLAVORS)}
    return _Snapshot(queues, cohorts, flavors, admitted)


def _pending(cluster: Cluster, snapshot: _Snapshot) -> list[_Pending]:
    """Workloads waiting for quota, in the order Kueue's queues hold them."""
    pending = []
    for workload in cluster.store.list(WORKLOADS):
        spec, status = workload.get("spec") or {}, workload.get("status") or {}
        if (
            status.get("admission")
            or get_condition(workload, "Finished")
            or not spec.get("active", True)
        ):
            continue
        queue = _queue_of(cluster, snapshot, workload)
        if queue is None:
            continue
        demand: dict[str, int] = {}
        for pod_set in spec.get("podSets") or []:
            for resource, amount in _pod_set_demand(pod_set).items():
                demand[resource] = demand.get(resource, 0) + amount
        pending.append(
            _Pending(
                workload,
                queue,
                demand,
                int(spec.get("priority") or 0),
                workload["metadata"].get("creationTimestamp", ""),
            )
        )
    pending.sort(key=lambda p: (-p.priority, p.created, p.workload["metadata"]["uid"]))
    return pending


def _pod_set_demand(pod_set: Obj) -> dict[str, int]:
    """What a pod set asks for: each pod's requests times its count (pods not counted)."""
    per_pod = pod_requests((pod_set.get("template") or {}).get("spec") or {})
    count = int(pod_set.get("count", 1))
    return {r: a * count for r, a in per_pod.items() if a and r != "pods"}


def pending_in(cluster: Cluster, queue: str) -> list[Obj]:
    """The workloads waiting in ClusterQueue ``queue``, in its order (the visibility API)."""
    local_queues = {
        (lq["metadata"]["namespace"], lq["metadata"]["name"]): (lq.get("spec") or {}).get(
            "clusterQueue"
        )
        for lq in cluster.store.list(LOCAL_QUEUES)
    }
    waiting = [
        w
        for w in cluster.store.list(WORKLOADS)
        if not (w.get("status") or {}).get("admission")
        and not get_condition(w, "Finished")
        and (w.get("spec") or {}).get("active", True)
        and local_queues.get((w["metadata"]["namespace"], (w.get("spec") or {}).get("queueName")))
        == queue
    ]
    waiting.sort(
        key=lambda w: (
            -int(w["spec"].get("priority") or 0),
            w["metadata"].get("creationTimestamp", ""),
            w["metadata"]["uid"],
        )
    )
    return waiting


def _queue_of(cluster: Cluster, snapshot: _Snapshot, workload: Obj) -> _Queue | None:
    """The workload's ClusterQueue, or None (its Pending condition then says why)."""
    ns = workload["metadata"]["namespace"]
    name = (workload.get("spec") or {}).get("queueName", "")
    ts = cluster.timestamp()
    local = cluster.store.get(LOCAL_QUEUES, ns, name)
    if local is None:
        _inadmissible(cluster, workload, f"LocalQueue {name} doesn't exist", ts)
        return None
    cq = (local.get("spec") or {}).get("clusterQueue", "")
    queue = snapshot.queues.get(cq)
    if queue is None:
        _inadmissible(cluster, workload, f"ClusterQueue {cq} doesn't exist", ts)
        return None
    namespace = cluster.store.get("namespaces", "", ns) or {}
    selector = (queue.obj.get("spec") or {}).get("namespaceSelector")
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    if selector is None or (selector and not match_label_selector_obj(selector, labels)):
        _inadmissible(
            cluster, workload, "workload namespace doesn't match ClusterQueue selector", ts
        )
        return None
    return queue


def _inadmissible(cluster: Cluster, workload: Obj, message: str, ts: str) -> None:
    _set(cluster, workload, condition("QuotaReserved", "False", "Inadmissible", message, ts, None))


def _set(cluster: Cluster, workload: Obj, cond: Obj) -> None:
    """Upsert a condition and store the workload when that changed it."""
    before = copy.deepcopy(workload.get("status"))
    set_condition(workload, cond)
    if workload.get("status") != before:
        cluster.store.put(WORKLOADS, workload)


@dataclass
class _Assignment:
    flavors: dict[str, str] = field(default_factory=dict)  # resource → flavor
    keys: dict[str, int] = field(default_factory=dict)  # quota key → amount
    reasons: list[str] = field(default_factory=list)
    borrowing: bool = False

    @property
    def fits(self) -> bool:
        return not self.reasons


def _assign(snapshot: _Snapshot, item: _Pending) -> _Assignment:
    """Flavors for each requested resource, in each resource group's flavor order: the
    first flavor that fits (even by borrowing) is taken, as Kueue's defaults do."""
    queue, cohort = item.queue, snapshot.cohorts[item.queue.cohort]
    result = _Assignment()
    covered = {r for resources, _ in queue.groups for r in resources}
    for resource in sorted(set(item.demand) - covered):
        result.reasons.append(f"resource {resource} unavailable in ClusterQueue")
    for resources, flavors in queue.groups:
        wanted = {r: item.demand[r] for r in resources if r in item.demand}
        if not wanted:
            continue
        tried = []
        for flavor, _ in flavors:
            problem = _flavor_problem(snapshot.flavors.get(flavor), flavor, item.workload)
            if problem:
                tried.append(problem)
                continue
            keys = {_quota_key(flavor, r): amount for r, amount in wanted.items()}
            fit = cohort.fit(queue.name, keys)
            if fit.fits:
                result.flavors.update(dict.fromkeys(wanted, flavor))
                result.keys.update(keys)
                result.borrowing |= fit.kind is FitKind.BORROWING
                break
            tried += _shortfalls(cohort, queue.name, flavor, wanted)
        else:
            result.reasons += tried
    return result


def _flavor_problem(flavor: Obj | None, name: str, workload: Obj) -> str:
    if flavor is None:
        return f"flavor {name} not found"
    labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    template = ((workload.get("spec") or {}).get("podSets") or [{}])[0].get("template") or {}
    selector = (template.get("spec") or {}).get("nodeSelector") or {}
    if any(key in labels and labels[key] != value for key, value in selector.items()):
        return f"flavor {name} doesn't match node affinity"
    return ""


def _shortfalls(cohort: Cohort, queue: str, flavor: str, wanted: dict[str, int]) -> list[str]:
    """Kueue's words for each resource of ``flavor`` that does not fit."""
    words = []
    for resource, amount in sorted(wanted.items()):
        key = _quota_key(flavor, resource)
        if cohort.quota(queue, key) is None:
            words.append(f"resource {resource} unavailable in ClusterQueue")
            continue
        most = cohort.most(queue, key)
        if amount > most:
            words.append(
                f"insufficient quota for {resource} in flavor {flavor}, previously considered "
                f"podsets requests (0) + current podset request "
                f"({format_quantity(amount, resource)}) > maximum capacity "
                f"({format_quantity(most, resource)})"
            )
            continue
        available = cohort.available(queue, key)
        if amount > available:
            words.append(
                f"insufficient unused quota for {resource} in flavor {flavor}, "
                f"{format_quantity(amount - available, resource)} more needed"
            )
    return words


def _schedule(cluster: Cluster) -> None:
    """Admission cycles, as Kueue's scheduler runs them: each ClusterQueue's head (its
    first undecided workload), the heads that fit without borrowing first, then higher
    priority, then older; the first is admitted, or preempts, or waits, and the heads are
    looked at again on the changed snapshot, until none is left."""
    snapshot = _snapshot(cluster)
    if not snapshot.queues:
        return
    evicting = {w["metadata"]["uid"] for w, _, _ in snapshot.admitted if _evicting(w)}
    waiting: dict[str, list[_Pending]] = {}
    for item in _pending(cluster, snapshot):
        waiting.setdefault(item.queue.name, []).append(item)
    while True:
        heads = [
            (item, _assign(snapshot, item))
            for queue, items in waiting.items()
            if items and not snapshot.queues[queue].blocked
            for item in items[:1]
        ]
        if not heads:
            return
        item, assignment = min(heads, key=lambda h: _head_order(snapshot, *h))
        waiting[item.queue.name].pop(0)
        if assignment.fits:
            _admit(cluster, snapshot, item, assignment)
        else:
            _wait_or_preempt(cluster, snapshot, item, assignment, evicting)


def _head_order(snapshot: _Snapshot, item: _Pending, assignment: _Assignment) -> tuple[Any, ...]:
    """Kueue's order among the ClusterQueues' heads with fair sharing on: those that fit
    without borrowing first; among borrowers, the lower weighted share of the cohort once
    admitted (``fairSharing.weight``); then higher priority, then older."""
    share = 0.0
    if assignment.fits and assignment.borrowing:
        share = snapshot.cohorts[item.queue.cohort].share(item.queue.name, assignment.keys)
    return (
        not assignment.fits,
        assignment.borrowing,
        share,
        -item.priority,
        item.created,
        item.workload["metadata"]["uid"],
    )


def _wait_or_preempt(
    cluster: Cluster,
    snapshot: _Snapshot,
    item: _Pending,
    assignment: _Assignment,
    evicting: set[str],
) -> None:
    victims = _victims(snapshot, item, evicting)
    message = "couldn't assign flavors to pod set main: " + ", ".join(sorted(assignment.reasons))
    if victims:
        for victim, reason in victims:
            _evict(cluster, victim, item, reason)
            evicting.add(victim["metadata"]["uid"])
        message += f". Pending the preemption of {len(victims)} workload(s)"
    ts = cluster.timestamp()
    _set(cluster, item.workload, condition("QuotaReserved", "False", "Pending", message, ts, None))
    if item.queue.strategy == "StrictFIFO":
        item.queue.blocked = True


def _evicting(workload: Obj) -> bool:
    evicted = get_condition(workload, "Evicted")
    return bool(evicted and evicted["status"] == "True")


def _admit(cluster: Cluster, snapshot: _Snapshot, item: _Pending, assignment: _Assignment) -> None:
    ts = cluster.timestamp()
    workload, queue = item.workload, item.queue
    workload["status"]["admission"] = {
        "clusterQueue": queue.name,
        "podSetAssignments": [
            {
                "name": pod_set.get("name", "main"),
                "flavors": dict(sorted(assignment.flavors.items())),
                "resourceUsage": {
                    r: format_quantity(used[r], r) for r in sorted(assignment.flavors) if r in used
                },
                "count": int(pod_set.get("count", 1)),
            }
            for pod_set in (workload.get("spec") or {}).get("podSets") or [{}]
            for used in [_pod_set_demand(pod_set)]
        ],
    }
    for ctype in ("Evicted", "Preempted"):
        previous = get_condition(workload, ctype)
        if previous and previous["status"] == "True":
            set_condition(
                workload,
                condition(
                    ctype, "False", "QuotaReserved", f"Previously: {previous['message']}", ts, None
                ),
            )
    reserved = f"Quota reserved in ClusterQueue {queue.name}"
    set_condition(workload, condition("QuotaReserved", "True", "QuotaReserved", reserved, ts, None))
    set_condition(
        workload, condition("Admitted", "True", "Admitted", "The workload is admitted", ts, None)
    )
    cluster.store.put(WORKLOADS, workload)
    snapshot.cohorts[queue.cohort].add(queue.name, assignment.keys)
    snapshot.admitted.append((workload, queue, dict(assignment.keys)))
    cluster.record_event(
        workload, "Normal", "QuotaReserved", f"{reserved}, wait time since queued was 0s", COMPONENT
    )
    cluster.record_event(
        workload,
        "Normal",
        "Admitted",
        f"Admitted by ClusterQueue {queue.name}, wait time since reservation was 0s",
        COMPONENT,
    )
    _start_job(cluster, workload, assignment, snapshot)


def _owner_of(cluster: Cluster, workload: Obj) -> tuple[str, Obj] | None:
    """The Workload's Job, TrainJob or Pod: (store key, object)."""
    owner = next(iter(workload["metadata"].get("ownerReferences") or []), None)
    if owner is None or owner.get("kind") not in OWNER_KEYS:
        return None
    key = OWNER_KEYS[owner["kind"]]
    found = cluster.store.get(key, workload["metadata"]["namespace"], owner["name"])
    return (key, found) if found is not None else None


def _job_of(cluster: Cluster, workload: Obj) -> Obj | None:
    owned = _owner_of(cluster, workload)
    return owned[1] if owned is not None and owned[0] == "jobs.batch" else None


def _start_job(
    cluster: Cluster, workload: Obj, assignment: _Assignment, snapshot: _Snapshot
) -> None:
    """Unsuspend the Job with its flavors' node labels and tolerations (as Kueue's
    ``RunWithPodSetsInfo`` does); a pod: its admission gate removed (``_ungate``)."""
    owned = _owner_of(cluster, workload)
    if owned is not None and owned[0] == "pods":
        _ungate(cluster, owned[1], assignment, snapshot)
        return
    if owned is not None and owned[0] == TRAINJOBS:
        _start_trainjob(cluster, owned[1], workload, assignment, snapshot)
        return
    job = _job_of(cluster, workload)
    if job is None:
        return
    spec = job["spec"]
    pod = spec["template"].setdefault("spec", {})
    _place(pod, assignment, snapshot)
    spec["template"].setdefault("metadata", {}).setdefault("labels", {})[
        "kueue.x-k8s.io/podset"
    ] = "main"
    spec["suspend"] = False
    cluster.store.put("jobs.batch", job)
    cluster.record_event(
        job,
        "Normal",
        "Started",
        f"Admitted by clusterQueue {assignment_queue(workload)}",
        "kueue-job-controller",
    )


def _ungate(cluster: Cluster, pod: Obj, assignment: _Assignment, snapshot: _Snapshot) -> None:
    """The pod integration's start: the flavors' node labels and tolerations, then the
    admission gate removed (the scheduler places it)."""
    spec = pod["spec"]
    _place(spec, assignment, snapshot)
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != KUEUE_GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    cluster.store.put("pods", pod)


def _placement(assignment: _Assignment, snapshot: _Snapshot) -> tuple[dict[str, str], list[Obj]]:
    """The node labels and tolerations of the flavors a workload was admitted on."""
    node_labels: dict[str, str] = {}
    tolerations: list[Obj] = []
    for flavor_name in sorted(set(assignment.flavors.values())):
        flavor = (snapshot.flavors.get(flavor_name) or {}).get("spec") or {}
        node_labels.update(flavor.get("nodeLabels") or {})
        tolerations.extend(copy.deepcopy(flavor.get("tolerations") or []))
    return node_labels, tolerations


def _place(pod_spec: Obj, assignment: _Assignment, snapshot: _Snapshot) -> None:
    """A Job's or a gated pod's spec, given its flavors' placement (``RunWithPodSetsInfo``)."""
    node_labels, tolerations = _placement(assignment, snapshot)
    pod_spec.setdefault("nodeSelector", {}).update(node_labels)
    if tolerations:
        pod_spec.setdefault("tolerations", []).extend(tolerations)


def assignment_queue(workload: Obj) -> str:
    return str(((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", ""))


def _victims(snapshot: _Snapshot, item: _Pending, evicting: set[str]) -> list[tuple[Obj, str]]:
    """Whom the workload may preempt to fit on its ClusterQueue's nominal quota, by the
    queue's preemption policy, in Kueue's order (``scheduling.sharing``)."""
    queue = item.queue
    policy = (queue.obj.get("spec") or {}).get("preemption") or {}
    reclaim = policy.get("reclaimWithinCohort", "Never")
    within = policy.get("withinClusterQueue", "Never")
    cohort = snapshot.cohorts[queue.cohort].copy()
    for workload, other, held in snapshot.admitted:
        if workload["metadata"]["uid"] in evicting and other.cohort == queue.cohort:
            cohort.remove(other.name, held)  # stops soon: its quota is as good as free
    flavors = _nominal_flavors(snapshot, item)
    if flavors is None:
        return []
    by_id: dict[int, tuple[Obj, _Queue]] = {}
    candidates = []
    for index, (workload, other, held) in enumerate(snapshot.admitted):
        priority = int((workload.get("spec") or {}).get("priority") or 0)
        if workload["metadata"]["uid"] in evicting or other.cohort != queue.cohort:
            continue
        if other is queue:
            allowed = within == "LowerPriority" and priority < item.priority
        else:
            allowed = reclaim == "Any" or (reclaim == "LowerPriority" and priority < item.priority)
        if not allowed:
            continue
        by_id[index] = (workload, other)
        admitted_at = _time(get_condition(workload, "QuotaReserved"))
        candidates.append(Running(other.name, index, priority, admitted_at, held))
    found = preemption_victims(cohort, team=queue.name, demand=flavors, candidates=candidates)
    if not found:
        return []
    return [
        (
            by_id[v.job_id][0],
            "InClusterQueue" if by_id[v.job_id][1] is queue else "InCohortReclamation",
        )
        for v in found
    ]


def _nominal_flavors(snapshot: _Snapshot, item: _Pending) -> dict[str, int] | None:
    """The quota keys the workload would take in the first flavor of each group whose
    nominal quota could hold it (where a preemption can make room), or None."""
    keys: dict[str, int] = {}
    for resources, flavors in item.queue.groups:
        wanted = {r: item.demand[r] for r in resources if r in item.demand}
        if not wanted:
            continue
        for flavor, quotas in flavors:
            if _flavor_problem(snapshot.flavors.get(flavor), flavor, item.workload):
                continue
            if all(r in quotas and amount <= quotas[r].nominal for r, amount in wanted.items()):
                keys.update({_quota_key(flavor, r): amount for r, amount in wanted.items()})
                break
        else:
            return None
    return keys or None


def _time(cond: Obj | None) -> datetime:
    stamp = (cond or {}).get("lastTransitionTime") or "1970-01-01T00:00:00Z"
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)


def _evict(cluster: Cluster, victim: Obj, preemptor: _Pending, reason: str) -> None:
    """Kueue's preemption: ``Evicted`` and ``Preempted`` on the victim, its Job suspended
    (its pods go; its quota stays counted until they have)."""
    ts = cluster.timestamp()
    job_uid = (preemptor.workload["metadata"].get("labels") or {}).get(JOB_UID_LABEL, "UNKNOWN")
    victim_queue = assignment_queue(victim)
    cohort = preemptor.queue.cohort

    def path(queue: str) -> str:
        return f"/{queue}" if cohort.startswith("/") else f"/{cohort}/{queue}"

    message = (
        f"Preempted to accommodate a workload (UID: {preemptor.workload['metadata']['uid']}, "
        f"JobUID: {job_uid}) due to {REASONS[reason]}; preemptor path: "
        f"{path(preemptor.queue.name)}; preemptee path: {path(victim_queue)}"
    )
    set_condition(victim, condition("Evicted", "True", "Preempted", message, ts, None))
    set_condition(victim, condition("Preempted", "True", reason, message, ts, None))
    cluster.store.put(WORKLOADS, victim)
    cluster.record_event(victim, "Normal", "Preempted", message, COMPONENT)
    cluster.record_event(victim, "Normal", "EvictedDueToPreempted", message, COMPONENT)
    owned = _owner_of(cluster, victim)
    if owned is not None and owned[0] == "pods":
        # A pod is stopped by deleting it; its ReplicaSet makes a new, gated one.
        meta = owned[1]["metadata"]
        objects.delete(cluster, BY_KEY["pods"], meta["namespace"], meta["name"], {})
        return
    if owned is not None and owned[0] == TRAINJOBS:
        if not owned[1]["spec"].get("suspend"):
            owned[1]["spec"]["suspend"] = True
            cluster.store.put(TRAINJOBS, owned[1])
        return
    job = _job_of(cluster, victim)
    if job is not None and not job["spec"].get("suspend"):
        job["spec"]["suspend"] = True
        cluster.store.put("jobs.batch", job)


# -- 5. Queue statuses -----------------------------------------------------------------------
def _write_queue_statuses(cluster: Cluster) -> None:
    snapshot = _snapshot(cluster)
    ts = cluster.timestamp()
    workloads = cluster.store.list(WORKLOADS)
    for queue in snapshot.queues.values():
        cohort = snapshot.cohorts[queue.cohort]
        held = [w for w, q, _ in snapshot.admitted if q is queue]
        missing = sorted(
            {f for _, flavors in queue.groups for f, _ in flavors} - set(snapshot.flavors)
        )
        status = {
            **(queue.obj.get("status") or {}),
            "flavorsReservation": _usage(cohort, queue, borrowed=True),
            "flavorsUsage": _usage(cohort, queue, borrowed=True),
            "pendingWorkloads": sum(
                1 for w in workloads if _waits_in(w, queue.name, snapshot, cluster)
            ),
            "reservingWorkloads": len(held),
            "admittedWorkloads": len(held),
        }
        obj = queue.obj
        before = copy.deepcopy(obj.get("status"))
        obj["status"] = status
        if missing:
            active = condition(
                "Active",
                "False",
                "FlavorNotFound",
                "Can't admit new workloads: references missing ResourceFlavor(s): "
                f"{','.join(missing)}.",
                ts,
                None,
            )
        else:
            active = condition("Active", "True", "Ready", "Can admit new workloads", ts, None)
        set_condition(obj, active)
        if obj.get("status") != before:
            cluster.store.put(CLUSTER_QUEUES, obj)
    _write_local_queue_statuses(cluster, snapshot, workloads)


def _usage(cohort: Cohort, queue: _Queue, *, borrowed: bool) -> list[Obj]:
    out = []
    for _, flavors in queue.groups:
        for flavor, quotas in flavors:
            resources = []
            for resource in quotas:
                key = _quota_key(flavor, resource)
                entry = {
                    "name": resource,
                    "total": format_quantity(cohort.usage(queue.name, key), resource),
                }
                if borrowed:
                    entry["borrowed"] = format_quantity(cohort.borrowed(queue.name, key), resource)
                resources.append(entry)
            out.append({"name": flavor, "resources": resources})
    return out


def _waits_in(workload: Obj, queue: str, snapshot: _Snapshot, cluster: Cluster) -> bool:
    if (workload.get("status") or {}).get("admission") or get_condition(workload, "Finished"):
        return False
    local = cluster.store.get(
        LOCAL_QUEUES,
        workload["metadata"]["namespace"],
        (workload.get("spec") or {}).get("queueName", ""),
    )
    return bool(local and (local.get("spec") or {}).get("clusterQueue") == queue)


def _write_local_queue_statuses(
    cluster: Cluster, snapshot: _Snapshot, workloads: list[Obj]
) -> None:
    ts = cluster.timestamp()
    for local in cluster.store.list(LOCAL_QUEUES):
        ns, name = local["metadata"]["namespace"], local["metadata"]["name"]
        mine = [
            w
            for w in workloads
            if w["metadata"]["namespace"] == ns and (w.get("spec") or {}).get("queueName") == name
        ]
        admitted = [w for w in mine if _holds_quota(w)]
        usage: dict[str, dict[str, int]] = {}
        for workload in admitted:
            for key, amount in _admitted_usage(workload).items():
                flavor, _, resource = key.partition("/")
                usage.setdefault(flavor, {})[resource] = (
                    usage.get(flavor, {}).get(resource, 0) + amount
                )
        flavors = [
            {
                "name": flavor,
                "resources": [
                    {"name": r, "total": format_quantity(a, r)} for r, a in sorted(res.items())
                ],
            }
            for flavor, res in sorted(usage.items())
        ]
        cq = (local.get("spec") or {}).get("clusterQueue", "")
        before = copy.deepcopy(local.get("status"))
        local["status"] = {
            **(local.get("status") or {}),
            "pendingWorkloads": sum(
                1
                for w in mine
                if not (w.get("status") or {}).get("admission") and not get_condition(w, "Finished")
            ),
            "reservingWorkloads": len(admitted),
            "admittedWorkloads": len(admitted),
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
        }
        if cq in snapshot.queues:
            active = condition(
                "Active", "True", "Ready", "Can submit new workloads to localQueue", ts, None
            )
        else:
            active = condition(
                "Active",
                "False",
                "ClusterQueueDoesNotExist",
                "Can't submit new workloads to clusterQueue",
                ts,
                None,
            )
        set_condition(local, active)
        if local.get("status") != before:
            cluster.store.put(LOCAL_QUEUES, local)
