"""JobSet's controller (``jobset.x-k8s.io/v1alpha2``), as kubernetes-sigs/jobset runs it.

Each pass, for each JobSet (not deleting, not managed by another controller):

1. Its child Jobs are sorted: *previous* (an earlier restart attempt), succeeded, failed,
   active; ``status.replicatedJobsStatus`` counts the current attempt's.
2. A finished JobSet deletes its still active Jobs and stops there. Previous Jobs are
   deleted (foreground), and re-created with the same names once gone.
3. A failed child Job: with no ``failurePolicy`` the JobSet fails (``FailedJobs``); with
   one, it restarts (``restarts`` + 1, every Job deleted and re-created with the new
   ``restart-attempt``) until ``maxRestarts``, then fails (``ReachedMaxRestarts``).
4. The success policy (``All`` by default, or ``Any``, over ``targetReplicatedJobs``)
   completes it (``AllJobsCompleted``).
5. Otherwise the headless Service (``network.subdomain`` or the JobSet's name) and every
   missing child Job ``<jobset>-<replicatedJob>-<index>`` are created, with JobSet's labels
   and annotations on the Job and its pods and the pods' ``subdomain``; ``spec.suspend``
   reaches the child Jobs both ways.

Conditions, reasons and messages are JobSet's (a condition type appears first as True).
Simplified (``sandbox/README.md``): no ``dependsOn``/``InOrder`` startup, coordinator,
failure-policy rules, volume claim policies or TTL.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from sandbox.api import crds, objects
from sandbox.api.resources import BY_KEY
from sandbox.controllers.common import get_condition, owned_by, owner_ref
from sandbox.state import Cluster

Obj = dict[str, Any]
JOBSETS = "jobsets.jobset.x-k8s.io"
PREFIX = "jobset.sigs.k8s.io/"
CONTROLLER = "jobset.sigs.k8s.io/jobset-controller"
COMPONENT = "jobset-controller"


def reconcile(cluster: Cluster) -> None:
    store = cluster.store
    if JOBSETS not in crds.SERVED or not store.count(JOBSETS):
        return
    inputs = (store.version(JOBSETS), store.version("jobs.batch"))
    if cluster.settled.get("jobset") == {"": inputs}:
        return
    for jobset in store.list(JOBSETS):
        meta, spec = jobset["metadata"], jobset.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("managedBy", CONTROLLER) != CONTROLLER:
            continue
        before = copy.deepcopy(jobset.get("status"))
        _sync(cluster, jobset)
        if jobset.get("status") != before:
            store.put(JOBSETS, jobset)
    cluster.settled["jobset"] = {"": (store.version(JOBSETS), store.version("jobs.batch"))}


def _done(job: Obj, kind: str) -> bool:
    cond = get_condition(job, kind)
    return bool(cond and cond["status"] == "True")


def _sync(cluster: Cluster, jobset: Obj) -> None:
    meta, spec = jobset["metadata"], jobset["spec"]
    status = jobset.setdefault("status", {})
    status.setdefault("restarts", 0)
    attempt = int(status["restarts"])
    jobs = owned_by(cluster, "jobs.batch", meta["namespace"], meta["uid"])
    current = [j for j in jobs if _attempt(j) >= attempt]
    previous = [j for j in jobs if _attempt(j) < attempt]
    failed = [j for j in current if _done(j, "Failed")]
    succeeded = [j for j in current if _done(j, "Complete")]
    active = [j for j in current if j not in failed and j not in succeeded]
    _counts(spec, status, active, succeeded, failed)
    if _finished(jobset):
        for job in active:
            _delete(cluster, job)
        return
    for job in previous:
        if not job["metadata"].get("deletionTimestamp"):
            _delete(cluster, job)
    if failed:
        _failure(cluster, jobset, failed)
        return
    if succeeded and _succeeded(spec, succeeded):
        _condition(
            cluster,
            jobset,
            "Completed",
            "True",
            "AllJobsCompleted",
            "jobset completed successfully",
        )
        _condition(
            cluster,
            jobset,
            "RestartingJobSet",
            "False",
            "JobSetCompleted",
            "jobset completed successfully",
        )
        status["terminalState"] = "Completed"
        return
    _service(cluster, jobset)
    names = {j["metadata"]["name"] for j in jobs}
    for job in _wanted(jobset):
        if job["metadata"]["name"] not in names:
            objects.create(
                cluster, BY_KEY["jobs.batch"], meta["namespace"], job, check_schema=False
            )
    _suspension(cluster, jobset, active)


def _attempt(job: Obj) -> int:
    value = (job["metadata"].get("labels") or {}).get(f"{PREFIX}restart-attempt", "0")
    return int(value) if str(value).isdigit() else 0


def _finished(jobset: Obj) -> bool:
    return _done(jobset, "Completed") or _done(jobset, "Failed")


def _counts(
    spec: Obj, status: Obj, active: list[Obj], succeeded: list[Obj], failed: list[Obj]
) -> None:
    """``replicatedJobsStatus``: the current attempt's Jobs per replicated job."""
    out = []
    for rjob in spec.get("replicatedJobs") or []:
        name = rjob["name"]

        def mine(jobs: list[Obj], rjob_name: str = name) -> list[Obj]:
            return [
                j
                for j in jobs
                if (j["metadata"].get("labels") or {}).get(f"{PREFIX}replicatedjob-name")
                == rjob_name
            ]

        pods = min(
            int((rjob["template"].get("spec") or {}).get("parallelism", 1)),
            int((rjob["template"].get("spec") or {}).get("completions") or 10**9),
        )
        running = mine(active)
        out.append(
            {
                "name": name,
                "ready": sum(
                    1
                    for j in running
                    if int((j.get("status") or {}).get("ready", 0))
                    + int((j.get("status") or {}).get("succeeded", 0))
                    >= pods
                ),
                "succeeded": len(mine(succeeded)),
                "failed": len(mine(failed)),
                "active": sum(
                    1 for j in running if int((j.get("status") or {}).get("active", 0)) > 0
                ),
                "suspended": sum(1 for j in running if j["spec"].get("suspend")),
            }
        )
    status["replicatedJobsStatus"] = out


def _failure(cluster: Cluster, jobset: Obj, failed: list[Obj]) -> None:
    status = jobset["status"]
    first = min(
        failed, key=lambda j: (get_condition(j, "Failed") or {}).get("lastTransitionTime", "")
    )
    name = first["metadata"]["name"]
    policy = jobset["spec"].get("failurePolicy")
    if policy is None:
        _fail(
            cluster,
            jobset,
            "FailedJobs",
            f"jobset failed due to one or more job failures (first failed job: {name})",
        )
        return
    if int(status.get("restartsCountTowardsMax", 0)) >= int(policy.get("maxRestarts", 0)):
        _fail(
            cluster,
            jobset,
            "ReachedMaxRestarts",
            f"jobset failed due to reaching max number of restarts (first failed job: {name})",
        )
        return
    message = f"applying RestartJobSet failure policy action (first failed job: {name})"
    status["restarts"] = int(status.get("restarts", 0)) + 1
    status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax", 0)) + 1
    _condition(
        cluster, jobset, "RestartingJobSet", "True", "DefaultFailurePolicy", message, "Warning"
    )
    cluster.record_event(
        jobset,
        "Warning",
        "RestartJobSetFailurePolicyAction",
        message,
        COMPONENT,
        action="Reconciling",
    )


def _fail(cluster: Cluster, jobset: Obj, reason: str, message: str) -> None:
    _condition(cluster, jobset, "Failed", "True", reason, message, "Warning")
    _condition(cluster, jobset, "RestartingJobSet", "False", "JobSetFailed", "jobset failed")
    jobset["status"]["terminalState"] = "Failed"


def _succeeded(spec: Obj, succeeded: list[Obj]) -> bool:
    policy = spec.get("successPolicy") or {"operator": "All"}
    targets = policy.get("targetReplicatedJobs") or [
        r["name"] for r in spec.get("replicatedJobs") or []
    ]
    matching = [
        j
        for j in succeeded
        if (j["metadata"].get("labels") or {}).get(f"{PREFIX}replicatedjob-name") in targets
    ]
    if policy.get("operator") == "Any":
        return bool(matching)
    expected = sum(
        int(r.get("replicas", 1)) for r in spec.get("replicatedJobs") or [] if r["name"] in targets
    )
    return len(matching) >= expected


def _condition(
    cluster: Cluster,
    jobset: Obj,
    ctype: str,
    status: str,
    reason: str,
    message: str,
    event_type: str = "Normal",
) -> None:
    """JobSet's ``updateCondition``: a new type appears only as True; a status change moves
    its time; each change is an event."""
    conds = jobset["status"].setdefault("conditions", [])
    old = next((c for c in conds if c["type"] == ctype), None)
    if old is None and status != "True":
        return
    if old is not None and (old["status"], old["reason"], old["message"]) == (
        status,
        reason,
        message,
    ):
        return
    ts = cluster.timestamp()
    new = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": ts
        if old is None or old["status"] != status
        else old["lastTransitionTime"],
    }
    if old is None:
        conds.append(new)
    else:
        conds[conds.index(old)] = new
    cluster.record_event(jobset, event_type, reason, message, COMPONENT, action="Reconciling")


def _delete(cluster: Cluster, job: Obj) -> None:
    objects.delete(
        cluster,
        BY_KEY["jobs.batch"],
        job["metadata"]["namespace"],
        job["metadata"]["name"],
        {"propagationPolicy": "Foreground"},
    )


def _subdomain(jobset: Obj) -> str | None:
    network = jobset["spec"].get("network") or {}
    if network.get("enableDNSHostnames", True) is False:
        return None
    return str(network.get("subdomain") or jobset["metadata"]["name"])


def _service(cluster: Cluster, jobset: Obj) -> None:
    """The headless Service the pods' hostnames resolve through (created once, if absent)."""
    name = _subdomain(jobset)
    meta = jobset["metadata"]
    if name is None or cluster.store.get("services", meta["namespace"], name) is not None:
        return
    network = jobset["spec"].get("network") or {}
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "ownerReferences": [owner_ref(jobset)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {f"{PREFIX}jobset-name": meta["name"]},
            "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
        },
    }
    objects.create(cluster, BY_KEY["services"], meta["namespace"], body, check_schema=False)


def _wanted(jobset: Obj) -> list[Obj]:
    """Every child Job of the current attempt, as JobSet builds them."""
    meta, spec = jobset["metadata"], jobset["spec"]
    rjobs = spec.get("replicatedJobs") or []
    total = sum(int(r.get("replicas", 1)) for r in rjobs)
    groups: dict[str, int] = {}
    for rjob in rjobs:
        groups[rjob.get("groupName", "default")] = groups.get(
            rjob.get("groupName", "default"), 0
        ) + int(rjob.get("replicas", 1))
    jobs: list[Obj] = []
    global_index = 0
    group_index: dict[str, int] = {}
    for rjob in rjobs:
        group = rjob.get("groupName", "default")
        for index in range(int(rjob.get("replicas", 1))):
            name = f"{meta['name']}-{rjob['name']}-{index}"
            keys = {
                f"{PREFIX}jobset-name": meta["name"],
                f"{PREFIX}jobset-uid": meta["uid"],
                f"{PREFIX}replicatedjob-name": rjob["name"],
                f"{PREFIX}restart-attempt": str(jobset["status"].get("restarts", 0)),
                f"{PREFIX}replicatedjob-replicas": str(rjob.get("replicas", 1)),
                f"{PREFIX}global-replicas": str(total),
                f"{PREFIX}job-index": str(index),
                f"{PREFIX}job-key": hashlib.sha1(  # noqa: S324 - JobSet's own key, not a secret
                    f"{meta['namespace']}/{name}".encode()
                ).hexdigest(),
                f"{PREFIX}job-global-index": str(global_index),
                f"{PREFIX}group-name": group,
                f"{PREFIX}group-replicas": str(groups[group]),
                f"{PREFIX}job-group-index": str(group_index.get(group, 0)),
            }
            global_index += 1
            group_index[group] = group_index.get(group, 0) + 1
            jobs.append(_job(jobset, rjob, name, keys))
    return jobs


def _job(jobset: Obj, rjob: Obj, name: str, keys: dict[str, str]) -> Obj:
    template = copy.deepcopy(rjob["template"])
    job_meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    pod = spec.setdefault("template", {})
    pod_meta = pod.setdefault("metadata", {})
    for holder in (job_meta, pod_meta):
        holder.setdefault("labels", {}).update(keys)
        holder.setdefault("annotations", {}).update(keys)
    subdomain = _subdomain(jobset)
    if subdomain:
        pod.setdefault("spec", {})["subdomain"] = subdomain
    spec["suspend"] = bool(jobset["spec"].get("suspend", False))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": jobset["metadata"]["namespace"],
            "labels": job_meta["labels"],
            "annotations": job_meta["annotations"],
            "ownerReferences": [owner_ref(jobset)],
        },
        "spec": spec,
    }


def _suspension(cluster: Cluster, jobset: Obj, active: list[Obj]) -> None:
    """``spec.suspend`` reaches the child Jobs, both ways; a resumed Job takes its template's
    scheduling directives back from the JobSet (Kueue sets them there)."""
    suspend = bool(jobset["spec"].get("suspend", False))
    templates = {r["name"]: r["template"] for r in jobset["spec"].get("replicatedJobs") or []}
    for job in active:
        if bool(job["spec"].get("suspend")) == suspend or job["metadata"].get("deletionTimestamp"):
            continue
        if not suspend:
            rjob = (job["metadata"].get("labels") or {}).get(f"{PREFIX}replicatedjob-name", "")
            wanted = ((templates.get(rjob) or {}).get("spec") or {}).get("template") or {}
            pod = job["spec"]["template"].setdefault("spec", {})
            for key in ("nodeSelector", "tolerations", "schedulingGates"):
                if key in (wanted.get("spec") or {}):
                    pod[key] = copy.deepcopy(wanted["spec"][key])
            (job.get("status") or {}).pop("startTime", None)
        job["spec"]["suspend"] = suspend
        cluster.store.put("jobs.batch", job)
    if suspend:
        _condition(cluster, jobset, "Suspended", "True", "SuspendedJobs", "jobset is suspended")
        _condition(
            cluster, jobset, "RestartingJobSet", "False", "JobSetSuspended", "jobset is suspended"
        )
    else:
        _condition(cluster, jobset, "Suspended", "False", "ResumeJobs", "jobset is resumed")
