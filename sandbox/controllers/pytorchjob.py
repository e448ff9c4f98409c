"""Kubeflow's training operator for ``kubeflow.org/v1`` PyTorchJobs (v1.9), as it runs them.

Each pass, for each PyTorchJob not finished:

1. ``Created`` (``PyTorchJobCreated``) once.
2. Suspended (``runPolicy.suspend``): its pods and Services go, ``Suspended`` is True and
   ``Running`` False; resumed, ``Suspended`` turns False and the pods come back.
3. A headless Service and a pod per replica, named ``<job>-master-0`` and
   ``<job>-worker-<i>``, labelled as the operator labels them
   (``training.kubeflow.org/{job-name,replica-type,replica-index,job-role}``), each
   container given ``MASTER_ADDR`` (the master's Service), ``MASTER_PORT`` (the
   ``pytorchjob-port`` of container ``pytorch``, else 23456), ``WORLD_SIZE``, ``RANK``
   (master 0, worker i + 1), ``PYTHONUNBUFFERED`` and torchrun's ``PET_NNODES``,
   ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``.
   The replica's ``restartPolicy`` is the pod's (``ExitCode`` runs as ``Never``).
4. ``status.replicaStatuses`` counts each type's active, succeeded and failed pods; the job
   is ``Running`` once every pod runs, ``Succeeded`` when the master's pod succeeds,
   ``Failed`` when a pod fails (its exit code in the message); ``cleanPodPolicy``
   (``None`` by default) decides which pods go at the end.

Conditions, reasons and messages are the operator's. Simplified (``sandbox/README.md``): no
elastic policy (``elasticPolicy`` is kept, not acted on), backoff limit, deadline, TTL or
scheduling policy; a replica restarted in place is left to the kubelet's restart policy.
"""

from __future__ import annotations

import copy
from typing import Any

from sandbox.api import crds, objects
from sandbox.api.resources import BY_KEY
from sandbox.controllers.common import (
    condition,
    create_pod,
    delete_pod,
    get_condition,
    owner_ref,
    set_condition,
)
from sandbox.state import Cluster

Obj = dict[str, Any]
PYTORCHJOBS = "pytorchjobs.kubeflow.org"
COMPONENT = "pytorchjob-controller"
PREFIX = "training.kubeflow.org/"
DEFAULT_PORT = 23456
TYPES = ("Master", "Worker")


def reconcile(cluster: Cluster) -> None:
    store = cluster.store
    if PYTORCHJOBS not in crds.SERVED or not store.count(PYTORCHJOBS):
        return
    inputs = (store.version(PYTORCHJOBS), store.version("pods"))
    if cluster.settled.get("pytorchjob") == {"": inputs}:
        return
    for job in store.list(PYTORCHJOBS):
        if job["metadata"].get("deletionTimestamp") or _finished(job):
            continue
        before = copy.deepcopy(job.get("status"))
        _sync(cluster, job)
        if job.get("status") != before:
            store.put(PYTORCHJOBS, job)
    cluster.settled["pytorchjob"] = {"": (store.version(PYTORCHJOBS), store.version("pods"))}


def _finished(job: Obj) -> bool:
    return any(
        (get_condition(job, kind) or {}).get("status") == "True" for kind in ("Succeeded", "Failed")
    )


def _set(cluster: Cluster, job: Obj, kind: str, status: str, reason: str, message: str) -> None:
    set_condition(
        job, condition(kind, status, reason, message, cluster.timestamp(), "lastUpdateTime")
    )


def _pods(cluster: Cluster, job: Obj) -> dict[str, Obj]:
    uid = job["metadata"]["uid"]
    return {
        p["metadata"]["name"]: p
        for p in cluster.store.list("pods", job["metadata"]["namespace"])
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    }


def _sync(cluster: Cluster, job: Obj) -> None:
    name = job["metadata"]["name"]
    status = job.setdefault("status", {})
    if get_condition(job, "Created") is None:
        _set(cluster, job, "Created", "True", "PyTorchJobCreated", f"PyTorchJob {name} is created.")
    pods = _pods(cluster, job)
    if (job["spec"].get("runPolicy") or {}).get("suspend"):
        for pod in pods.values():
            if not pod["metadata"].get("deletionTimestamp"):
                delete_pod(cluster, job, pod, COMPONENT)
        _set(
            cluster,
            job,
            "Running",
            "False",
            "PyTorchJobSuspended",
            f"PyTorchJob {name} is suspended.",
        )
        _set(
            cluster,
            job,
            "Suspended",
            "True",
            "PyTorchJobSuspended",
            f"PyTorchJob {name} is suspended.",
        )
        status.pop("startTime", None)
        return
    if (get_condition(job, "Suspended") or {}).get("status") == "True":
        _set(
            cluster,
            job,
            "Suspended",
            "False",
            "PyTorchJobResumed",
            f"PyTorchJob {name} is resumed.",
        )
    status.setdefault("startTime", cluster.timestamp())
    replicas = _replicas(job)
    for rtype, index, rank in replicas:
        pod_name = f"{name}-{rtype.lower()}-{index}"
        _service(cluster, job, rtype, index, pod_name)
        if pod_name not in pods:
            created, error = create_pod(
                cluster, job, _template(job, rtype, rank, len(replicas)), "", COMPONENT,
                extra_labels=_labels(name, rtype, index),
                spec_patch={"hostname": pod_name, "subdomain": pod_name}, name=pod_name,
            )  # fmt: skip
            if created is None:
                cluster.record_event(job, "Warning", "FailedCreatePod", str(error), COMPONENT)
            else:
                pods[pod_name] = created
    _status(cluster, job, pods, replicas)


def _replicas(job: Obj) -> list[tuple[str, int, int]]:
    """(type, index, rank) of every replica: the master is rank 0, worker i is i + 1."""
    specs = job["spec"].get("pytorchReplicaSpecs") or {}
    out = []
    for rtype in TYPES:
        for index in range(
            int((specs.get(rtype) or {}).get("replicas", 1 if rtype in specs else 0))
        ):
            out.append(
                (rtype, index, index + (1 if rtype == "Worker" and "Master" in specs else 0))
            )
    return out


def _labels(name: str, rtype: str, index: int) -> dict[str, str]:
    labels = {
        f"{PREFIX}job-name": name,
        f"{PREFIX}operator-name": COMPONENT,
        f"{PREFIX}replica-type": rtype.lower(),
        f"{PREFIX}replica-index": str(index),
    }
    if rtype == "Master":
        labels[f"{PREFIX}job-role"] = "master"
    return labels


def _port(job: Obj) -> int:
    specs = job["spec"].get("pytorchReplicaSpecs") or {}
    template = (specs.get("Master") or specs.get("Worker") or {}).get("template") or {}
    for container in (template.get("spec") or {}).get("containers") or []:
        if container.get("name") == "pytorch":
            for port in container.get("ports") or []:
                if port.get("name") == "pytorchjob-port":
                    return int(port["containerPort"])
    return DEFAULT_PORT


def _template(job: Obj, rtype: str, rank: int, world: int) -> Obj:
    """The replica's pod template with the operator's env and restart policy."""
    spec = job["spec"]
    replica = (spec.get("pytorchReplicaSpecs") or {}).get(rtype) or {}
    template = copy.deepcopy(replica.get("template") or {})
    pod = template.setdefault("spec", {})
    policy = replica.get("restartPolicy", "OnFailure")
    pod["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    master = f"{job['metadata']['name']}-master-0"
    nproc = str(spec.get("nprocPerNode") or "auto")
    per_node = int(nproc) if nproc.isdigit() else 1
    port = str(_port(job))
    env = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "MASTER_PORT", "value": port},
        {"name": "PET_MASTER_PORT", "value": port},
        {"name": "MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "WORLD_SIZE", "value": str(world * per_node)},
        {"name": "RANK", "value": str(rank)},
        {"name": "PET_NPROC_PER_NODE", "value": nproc},
        {"name": "PET_NODE_RANK", "value": str(rank)},
        {"name": "PET_NNODES", "value": str(world)},
    ]
    for container in pod.get("containers") or []:
        container["env"] = [*(container.get("env") or []), *env]
    return template


def _service(cluster: Cluster, job: Obj, rtype: str, index: int, name: str) -> None:
    ns = job["metadata"]["namespace"]
    if cluster.store.get("services", ns, name) is not None:
        return
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": _labels(job["metadata"]["name"], rtype, index),
            "ownerReferences": [owner_ref(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": _labels(job["metadata"]["name"], rtype, index),
            "ports": [{"name": "pytorchjob-port", "port": _port(job)}],
        },
    }
    objects.create(cluster, BY_KEY["services"], ns, body, check_schema=False)
    cluster.record_event(
        job, "Normal", "SuccessfulCreateService", f"Created service: {name}", COMPONENT
    )


def _status(
    cluster: Cluster, job: Obj, pods: dict[str, Obj], replicas: list[tuple[str, int, int]]
) -> None:
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    counts: dict[str, dict[str, int]] = {}
    failed: list[tuple[str, Obj]] = []
    for rtype, index, _ in replicas:
        pod = pods.get(f"{name}-{rtype.lower()}-{index}")
        phase = ((pod or {}).get("status") or {}).get("phase")
        entry = counts.setdefault(rtype, {"active": 0, "succeeded": 0, "failed": 0})
        if phase == "Succeeded":
            entry["succeeded"] += 1
        elif phase == "Failed":
            entry["failed"] += 1
            failed.append((rtype, pod or {}))
        elif phase == "Running":
            entry["active"] += 1
    job["status"]["replicaStatuses"] = {
        rtype: {
            **{k: v for k, v in entry.items() if v},
            "selector": f"{PREFIX}job-name={name},{PREFIX}replica-type={rtype.lower()}",
        }
        for rtype, entry in counts.items()
    }
    if failed:
        rtype, pod = failed[0]
        code = _exit_code(pod)
        message = (
            f"PyTorchJob {ns}/{name} has failed because {len(failed)} {rtype} replica(s) "
            f"failed." + (f" Exit code {code}." if code is not None else "")
        )
        _finish(cluster, job, pods, "Failed", "PyTorchJobFailed", message)
    elif counts.get("Master", {}).get("succeeded") or (
        "Master" not in counts and counts.get("Worker", {}).get("succeeded") == len(replicas)
    ):
        message = f"PyTorchJob {ns}/{name} successfully completed."
        _finish(cluster, job, pods, "Succeeded", "PyTorchJobSucceeded", message)
    elif sum(e["active"] for e in counts.values()) == len(replicas):
        _set(
            cluster,
            job,
            "Running",
            "True",
            "PyTorchJobRunning",
            f"PyTorchJob {ns}/{name} is running.",
        )


def _exit_code(pod: Obj) -> int | None:
    for state in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (state.get("state") or {}).get("terminated") or {}
        if "exitCode" in terminated:
            return int(terminated["exitCode"])
    return None


def _finish(
    cluster: Cluster, job: Obj, pods: dict[str, Obj], kind: str, reason: str, message: str
) -> None:
    _set(cluster, job, "Running", "False", reason, message)
    _set(cluster, job, kind, "True", reason, message)
    job["status"]["completionTime"] = cluster.timestamp()
    cluster.record_event(
        job, "Normal" if kind == "Succeeded" else "Warning", reason, message, COMPONENT
    )
    policy = (job["spec"].get("runPolicy") or {}).get("cleanPodPolicy", "None")
    for pod in pods.values():
        phase = (pod.get("status") or {}).get("phase")
        if policy == "All" or (policy == "Running" and phase not in ("Succeeded", "Failed")):
            delete_pod(cluster, job, pod, COMPONENT)
