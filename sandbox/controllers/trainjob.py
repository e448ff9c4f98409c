"""Kubeflow Trainer v2's TrainJob controller (``trainer.kubeflow.org/v1alpha1``, release
v2.3), as kubeflow/trainer runs it: a TrainJob becomes a JobSet of the same name built from
its runtime, and its status follows that JobSet.

Each pass, for each TrainJob (not deleting, managed by Trainer, not finished):

1. Its runtime (``spec.runtimeRef``: a ClusterTrainingRuntime, or a TrainingRuntime in its
   namespace). A kind Trainer does not run fails it (``TrainingRuntimeNotSupported``); a
   runtime that is gone is a ``TrainJobResourcesCreationFailed`` warning, tried again.
2. The JobSet: the runtime's template, the TrainJob's ``runtimePatches`` merged over it (in
   list order; replicated jobs by name, the pod template as a strategic merge patch), then
   the trainer: the replicated job labelled ``trainer.kubeflow.org/trainjob-ancestor-step:
   trainer`` runs ``numNodes`` pods (``trainer.numNodes``, else the runtime's
   ``mlPolicy.numNodes``), its container ``node`` takes the trainer's image, command, args,
   env and ``resourcesPerNode`` and port 29500, and, for a torch runtime, torchrun's
   ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``
   (``<job>-node-0-0.<job>``), ``PET_MASTER_PORT``. ``spec.suspend`` is the TrainJob's.
   A JobSet that exists is left alone while both it and the TrainJob run (Trainer's rule);
   it is built again while either is suspended, so a resume takes the patches in force.
3. Status: ``Suspended`` (``Suspended`` / ``TrainJob is suspended``, then ``Resumed`` /
   ``TrainJob is resumed``); ``Complete`` and ``Failed`` copied from the JobSet's
   ``Completed`` and ``Failed``; ``jobsStatus`` from its ``replicatedJobsStatus``;
   ``activeDeadlineSeconds`` past (counted from creation or the last resume) fails it
   (``DeadlineExceeded``) and deletes the JobSet.
4. ``trainerStatus`` (the alpha ``TrainJobStatus`` gate, on in the sandbox): the sandbox's
   trainer reports its progress the way a training script does through Trainer's status
   server (``progressPercentage``, ``estimatedRemainingSeconds`` on the wall clock,
   metrics ``step`` and ``total``), where its container has ``KUBEFLOW_TRAINER_SERVER_URL``.

Simplified (``sandbox/README.md``): no runtime snapshot ConfigMap (the runtime is read when
the JobSet is built), no initializers' storage env, no MPI, JAX or XGBoost policies, no
pod-group policy; torchtune's command is not rewritten.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from sandbox.api import crds, objects
from sandbox.api.admission import jobset_defaults
from sandbox.api.patch import strategic_merge_patch
from sandbox.api.resources import BY_KEY
from sandbox.controllers.common import condition, get_condition, owner_ref, set_condition
from sandbox.logs import step_seconds, total_steps
from sandbox.state import Cluster

Obj = dict[str, Any]
TRAINJOBS = "trainjobs.trainer.kubeflow.org"
RUNTIMES = "trainingruntimes.trainer.kubeflow.org"
CLUSTER_RUNTIMES = "clustertrainingruntimes.trainer.kubeflow.org"
JOBSETS = "jobsets.jobset.x-k8s.io"
GROUP = "trainer.kubeflow.org"
CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
COMPONENT = "trainjob-controller"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
NODE = "node"
PORT = 29500
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                "PET_MASTER_PORT")  # fmt: skip
STATUS_SERVER_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
STATUS_SERVER_URL = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:8443"
RUNTIME_KINDS = {"ClusterTrainingRuntime": CLUSTER_RUNTIMES, "TrainingRuntime": RUNTIMES}


def reconcile(cluster: Cluster) -> None:
    store = cluster.store
    if TRAINJOBS not in crds.SERVED or not store.count(TRAINJOBS):
        return
    for trainjob in store.list(TRAINJOBS):
        meta, spec = trainjob["metadata"], trainjob.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("managedBy", CONTROLLER) != CONTROLLER:
            continue
        if _finished(trainjob):
            continue
        before = copy.deepcopy(trainjob.get("status"))
        _sync(cluster, trainjob)
        if trainjob.get("status") != before:
            store.put(TRAINJOBS, trainjob)


def _finished(trainjob: Obj) -> bool:
    return any(
        (get_condition(trainjob, kind) or {}).get("status") == "True"
        for kind in ("Complete", "Failed")
    )


def runtime_of(cluster: Cluster, trainjob: Obj) -> tuple[str, Obj | None]:
    """(the runtime's store key, the runtime or None); key "" for a kind Trainer lacks."""
    ref = trainjob["spec"].get("runtimeRef") or {}
    key = RUNTIME_KINDS.get(str(ref.get("kind") or "ClusterTrainingRuntime"), "")
    if (ref.get("apiGroup") or GROUP) != GROUP or not key:
        return "", None
    ns = trainjob["metadata"]["namespace"] if key == RUNTIMES else ""
    return key, cluster.store.get(key, ns, str(ref.get("name", "")))


def _sync(cluster: Cluster, trainjob: Obj) -> None:
    meta, spec = trainjob["metadata"], trainjob["spec"]
    key, runtime = runtime_of(cluster, trainjob)
    ts = cluster.timestamp()
    if not key:
        ref = spec.get("runtimeRef") or {}
        message = f"unsupported runtime: {ref.get('kind')}.{ref.get('apiGroup')}"
        _set(trainjob, "Failed", "True", "TrainingRuntimeNotSupported", message, ts)
        return
    jobset = cluster.store.get(JOBSETS, meta["namespace"], meta["name"])
    if runtime is None:
        if jobset is None:
            kind = "ClusterTrainingRuntime" if key == CLUSTER_RUNTIMES else "TrainingRuntime"
            cluster.record_event(
                trainjob,
                "Warning",
                "TrainJobResourcesCreationFailed",
                "TrainJob resources reconciliation failed: not found "
                f"{kind} specified in TrainJob: {kind.lower()}s.{GROUP} "
                f'"{spec["runtimeRef"].get("name")}" not found',
                COMPONENT,
            )
    else:
        jobset = _apply_jobset(cluster, trainjob, runtime, jobset)
    _suspension(trainjob, ts)
    if jobset is not None:
        _follow(trainjob, jobset)
        if _past_deadline(cluster, trainjob):
            message = "TrainJob exceeded its active deadline"
            _set(trainjob, "Failed", "True", "DeadlineExceeded", message, ts)
            objects.delete(cluster, BY_KEY[JOBSETS], meta["namespace"], meta["name"], {})
            return
        _trainer_status(cluster, trainjob, jobset, ts)


def _set(trainjob: Obj, kind: str, status: str, reason: str, message: str, ts: str) -> None:
    set_condition(trainjob, condition(kind, status, reason, message, ts, None))


def _apply_jobset(cluster: Cluster, trainjob: Obj, runtime: Obj, jobset: Obj | None) -> Obj:
    """Create the JobSet, or build it again while it or the TrainJob is suspended."""
    wanted = build_jobset(trainjob, runtime)
    meta = trainjob["metadata"]
    if jobset is None:
        created, _ = objects.create(
            cluster, BY_KEY[JOBSETS], meta["namespace"], wanted, check_schema=False
        )
        return created
    suspended = bool(trainjob["spec"].get("suspend")) or bool(jobset["spec"].get("suspend"))
    if not suspended:
        return jobset
    current = copy.deepcopy(jobset)
    current["metadata"]["labels"] = wanted["metadata"]["labels"]
    current["metadata"]["annotations"] = wanted["metadata"]["annotations"]
    for field in ("replicatedJobs", "suspend"):
        current["spec"][field] = wanted["spec"][field]
    if current == jobset:
        return jobset
    # JobSet's webhook defaults what the runtime left out, as on create.
    jobset_defaults(current)
    if current == jobset:
        return jobset
    updated, _ = objects.update(
        cluster, BY_KEY[JOBSETS], meta["namespace"], meta["name"], current, check_schema=False
    )
    return updated


def build_jobset(trainjob: Obj, runtime: Obj) -> Obj:
    """The JobSet Trainer makes of a TrainJob and its runtime (step 2)."""
    template = copy.deepcopy((runtime.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    annotations = dict(tmeta.get("annotations") or {})
    spec = template.get("spec") or {}
    rjobs = spec.setdefault("replicatedJobs", [])
    for patch in trainjob["spec"].get("runtimePatches") or []:
        patched = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        labels.update((patched.get("metadata") or {}).get("labels") or {})
        annotations.update((patched.get("metadata") or {}).get("annotations") or {})
        for rpatch in (patched.get("spec") or {}).get("replicatedJobs") or []:
            for i, rjob in enumerate(rjobs):
                if rjob.get("name") == rpatch.get("name"):
                    rjobs[i] = strategic_merge_patch(rjob, {"template": rpatch.get("template")})
    trainer = trainjob["spec"].get("trainer")
    policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
    nodes = int((trainer or {}).get("numNodes") or policy.get("numNodes") or 1)
    for rjob in rjobs:
        job = rjob.setdefault("template", {})
        if (job.get("metadata") or {}).get("labels", {}).get(ANCESTOR_LABEL) == TRAINER_STEP:
            _trainer_job(trainjob, rjob, nodes, trainer, torch="torch" in policy)
    spec["suspend"] = bool(trainjob["spec"].get("suspend"))
    meta = trainjob["metadata"]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_ref(trainjob)],
        },
        "spec": spec,
    }


def _trainer_job(trainjob: Obj, rjob: Obj, nodes: int, trainer: Obj | None, torch: bool) -> None:
    rjob["replicas"] = 1
    job_spec = rjob["template"].setdefault("spec", {})
    job_spec["parallelism"] = job_spec["completions"] = nodes
    pod = job_spec.setdefault("template", {}).setdefault("spec", {})
    node = next((c for c in pod.get("containers") or [] if c.get("name") == NODE), None)
    if node is None or trainer is None:
        return
    for field in ("image", "command", "args"):
        if trainer.get(field):
            node[field] = copy.deepcopy(trainer[field])
    if trainer.get("resourcesPerNode"):
        resources = node.setdefault("resources", {})
        for part, amounts in trainer["resourcesPerNode"].items():
            if isinstance(amounts, dict):
                resources.setdefault(part, {}).update({k: _quantity(v) for k, v in amounts.items()})
    env = [*(trainer.get("env") or [])]
    if torch:
        name = trainjob["metadata"]["name"]
        env += [
            {"name": "PET_NNODES", "value": str(nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": _nproc(trainer, node)},
            {
                "name": "PET_NODE_RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}
                },
            },
            {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(PORT)},
        ]
    env.append({"name": STATUS_SERVER_ENV, "value": STATUS_SERVER_URL})
    node["env"] = strategic_merge_patch(node.get("env") or [], env, "env")
    ports = node.setdefault("ports", [])
    if not any(p.get("containerPort") == PORT for p in ports):
        ports.append({"containerPort": PORT})


def _quantity(value: Any) -> str:
    """A quantity as Trainer writes it into the JobSet (a Go ``Quantity``: a string; a
    whole number a client sent as ``2.0`` is ``"2"``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _nproc(trainer: Obj, node: Obj) -> str:
    """torchrun's processes per node: the trainer's ``numProcPerNode``, else ``auto`` on
    GPUs, else the CPUs asked for (at least 1)."""
    if trainer.get("numProcPerNode"):
        return str(trainer["numProcPerNode"])
    resources = node.get("resources") or {}
    for part in ("requests", "limits"):
        amounts = resources.get(part) or {}
        if any("gpu" in name for name in amounts):
            return "auto"
    cpu = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu")
    if cpu is None:
        return "1"
    text = str(cpu)
    cores = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    return str(max(1, math.ceil(cores)))


def _suspension(trainjob: Obj, ts: str) -> None:
    if trainjob["spec"].get("suspend"):
        _set(trainjob, "Suspended", "True", "Suspended", "TrainJob is suspended", ts)
    elif (get_condition(trainjob, "Suspended") or {}).get("status") == "True":
        _set(trainjob, "Suspended", "False", "Resumed", "TrainJob is resumed", ts)


def _follow(trainjob: Obj, jobset: Obj) -> None:
    """``Complete`` / ``Failed`` as the JobSet's, and ``jobsStatus``."""
    status = trainjob.setdefault("status", {})
    for source, target in (("Completed", "Complete"), ("Failed", "Failed")):
        found = get_condition(jobset, source)
        if found and found.get("status") == "True":
            copied = {k: v for k, v in found.items() if k != "observedGeneration"}
            set_condition(trainjob, {**copied, "type": target})
    jobs = (jobset.get("status") or {}).get("replicatedJobsStatus")
    if jobs is not None:
        status["jobsStatus"] = copy.deepcopy(jobs)


def _started(trainjob: Obj) -> str:
    resumed = get_condition(trainjob, "Suspended")
    if resumed and resumed.get("status") == "False":
        return str(resumed["lastTransitionTime"])
    return str(trainjob["metadata"]["creationTimestamp"])


def _past_deadline(cluster: Cluster, trainjob: Obj) -> bool:
    deadline = trainjob["spec"].get("activeDeadlineSeconds")
    if not deadline or trainjob["spec"].get("suspend") or _finished(trainjob):
        return False
    return cluster.now() - cluster.sim_time(_started(trainjob)) > float(deadline)


def _trainer_status(cluster: Cluster, trainjob: Obj, jobset: Obj, ts: str) -> None:
    """What the sandbox's trainer would push to Trainer's status server: its progress,
    rank 0's (the pod of index 0 of the trainer's job), once it has made some."""
    pod = _rank_zero(cluster, jobset)
    if pod is None:
        return
    node = next((c for c in pod["spec"]["containers"] if c.get("name") == NODE), None)
    if node is None or not any(e.get("name") == STATUS_SERVER_ENV for e in node.get("env") or []):
        return
    life = cluster.store.meta_get(f"life/{pod['metadata']['uid']}") or {}
    if life.get("started") is None or life.get("kind", "training") != "training":
        return
    planned = float(life.get("planned") or life.get("duration") or 60)
    every, total = step_seconds(planned), total_steps(planned)
    end = float(life["finished"]) if life.get("finished") is not None else cluster.now()
    done = int((end - float(life["started"])) // every)
    step = min(total, int(life.get("resume_step", 0)) + done)
    if step <= 0:
        return
    percent = min(100, int(100 * step / total))
    previous = (trainjob.get("status") or {}).get("trainerStatus") or {}
    if previous.get("progressPercentage") == percent:
        return
    trainjob["status"]["trainerStatus"] = {
        "progressPercentage": percent,
        # The trainer's own seconds: the wall clock's, as every timestamp the API gives.
        "estimatedRemainingSeconds": int((total - step) * every / cluster.clock.speed),
        "metrics": [{"name": "step", "value": str(step)}, {"name": "total", "value": str(total)}],
        "lastUpdatedTime": ts,
    }


def _rank_zero(cluster: Cluster, jobset: Obj) -> Obj | None:
    rjob = next(
        (
            r
            for r in jobset["spec"].get("replicatedJobs") or []
            if ((r.get("template") or {}).get("metadata") or {})
            .get("labels", {})
            .get(ANCESTOR_LABEL)
            == TRAINER_STEP
        ),
        None,
    )
    if rjob is None:
        return None
    job_name = f"{jobset['metadata']['name']}-{rjob['name']}-0"
    pods = [
        p
        for p in cluster.store.list("pods", jobset["metadata"]["namespace"])
        if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job_name
        and (p["metadata"].get("annotations") or {}).get(COMPLETION_INDEX) == "0"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return max(pods, key=lambda p: str(p["metadata"].get("creationTimestamp")), default=None)
