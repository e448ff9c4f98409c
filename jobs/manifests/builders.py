"""Pure builders: ``JobSpec`` → Kubernetes objects as plain dicts, in apply order.

Security by construction: only the allow-listed fields of the spec reach the
manifest, and every pod runs with the Pod Security Standards "restricted"
settings, in the team's namespace, without a service-account token.

Shapes:

- training, ``workers == 1``: one ``batch/v1`` Job.
- training, ``workers > 1``: a headless Service, then an Indexed Job whose pods
  find worker 0 at ``<job>-0.<service>`` and can start ``torchrun`` with no flags.
- inference: an ``apps/v1`` Deployment, then a ClusterIP Service in front of it.
- workspace: its token Secret, a one-pod Deployment with the home claim, a ClusterIP
  Service (``jobs.manifests.workspace``).
"""

from __future__ import annotations

import copy
from typing import Any

from cluster.labels import WORKLOAD_SERVICE_ACCOUNT
from cluster.priority_classes import priority_class_name
from jobs.manifests.context import ManifestContext
from jobs.manifests.naming import object_labels, object_name, selector_labels
from jobs.manifests.resources import container_resources, gpu_resource_name, shm_size_limit
from jobs.manifests.trainer import (
    TRAINER_API,
    TRAINER_CONTAINER,
    TRAINER_JOB,
    TRAINER_PATCH_MANAGER,
)
from jobs.manifests.workspace import (
    container_extras as workspace_container_extras,
)
from jobs.manifests.workspace import (
    server_args,
    token_env,
    workspace_objects,
)
from jobs.spec import JobSpec
from scheduling.resources import ANY_GPU, GPU_PRODUCT_LABEL

Manifest = dict[str, Any]

CONTAINER_NAME = "main"
HTTP_PORT_NAME = "http"
RENDEZVOUS_PORT_NAME = "rendezvous"
SHM_VOLUME_NAME = "dshm"
CHECKPOINT_VOLUME_NAME = "checkpoint"
# The node label every kubelet sets to its node's name: what excluding a node selects on.
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The node lifecycle controller's taints on a node whose kubelet stopped posting status.
NODE_NOT_READY = "node.kubernetes.io/not-ready"
NODE_UNREACHABLE = "node.kubernetes.io/unreachable"
# Pod Security Standards "restricted" forbids root; 1000 is the conventional
# first non-system uid and what most ML base images create their user as.
POD_UID = 1000
POD_GID = 1000

HOSTNAME_TOPOLOGY_KEY = "kubernetes.io/hostname"
# The label that puts a Job, or a pod, in one of Kueue's LocalQueues.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# Model loading can take minutes (weights pulled from a PVC or a hub, then
# copied to the GPU): the startup probe allows 10 s × 60 = 10 minutes before
# the kubelet restarts the container; liveness only starts counting after it.
STARTUP_PERIOD_SECONDS = 10
STARTUP_FAILURE_THRESHOLD = 60

# Names the portal sets for distributed training; they win over a user env var
# of the same name (spec validation should refuse such names up front).
DISTRIBUTED_ENV_NAMES = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "NODE_RANK",
        "RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
    }
)


def build_manifests(spec: JobSpec, ctx: ManifestContext) -> list[Manifest]:
    """The objects to apply for one job, in the order to apply them."""
    if spec.kind == "inference":
        manifests = [_deployment(spec, ctx), _inference_service(spec, ctx)]
    elif spec.kind == "workspace":
        manifests = _workspace(spec, ctx)
    elif spec.launcher == "pytorchjob":
        manifests = [_pytorchjob(spec, ctx)]  # its operator makes the pods' Services
    elif spec.launcher == "trainjob":
        manifests = [_trainjob(spec, ctx)]  # Trainer makes its JobSet, JobSet the rest
    elif spec.workers > 1:
        # The Service goes first so worker 0's DNS name exists by the time
        # the other workers try to reach it.
        manifests = [_headless_service(spec, ctx), _indexed_job(spec, ctx)]
    else:
        manifests = [_single_job(spec, ctx)]
    if ctx.kueue_queue:
        for manifest in manifests:
            _for_kueue(manifest, ctx.kueue_queue)
    return manifests


def _for_kueue(manifest: Manifest, queue: str) -> None:
    """Hand the job to Kueue (QUEUEING-NOTES, "Running on Kueue"): a Job or a TrainJob names
    its LocalQueue and is created suspended, for Kueue to unsuspend once admitted; a
    Deployment's pods name it too (Kueue's pod integration gates each until admitted).
    Services are not Kueue's business."""
    if manifest["kind"] in ("Job", "TrainJob"):
        manifest["metadata"]["labels"][KUEUE_QUEUE_LABEL] = queue
        manifest["spec"]["suspend"] = True
    elif manifest["kind"] == "Deployment":
        manifest["metadata"]["labels"][KUEUE_QUEUE_LABEL] = queue
        manifest["spec"]["template"]["metadata"]["labels"][KUEUE_QUEUE_LABEL] = queue


def _metadata(spec: JobSpec, ctx: ManifestContext) -> dict[str, Any]:
    return {
        "name": object_name(spec, ctx),
        "namespace": ctx.namespace,
        "labels": object_labels(spec, ctx),
    }


def _single_job(spec: JobSpec, ctx: ManifestContext) -> Manifest:
    job_spec: dict[str, Any] = {
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": spec.retries,
    }
    if spec.max_runtime_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    job_spec["template"] = _pod_template(spec, ctx, restart_policy="Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec, ctx),
        "spec": job_spec,
    }


def _headless_service(spec: JobSpec, ctx: ManifestContext) -> Manifest:
    """Gives each Indexed Job pod a DNS name, ``<job>-<index>.<service>``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, ctx),
        "spec": {
            "clusterIP": "None",
            # Workers must resolve each other while still starting up, before
            # any of them would count as ready.
            "publishNotReadyAddresses": True,
            "selector": selector_labels(ctx),
            "ports": [
                {
                    "name": RENDEZVOUS_PORT_NAME,
                    "protocol": "TCP",
                    "port": ctx.master_port,
                    "targetPort": ctx.master_port,
                }
            ],
        },
    }


def _indexed_job(spec: JobSpec, ctx: ManifestContext) -> Manifest:
    """One pod per worker, each with a stable index, hostname and DNS name.

    No required pod anti-affinity between workers: a worker that asks for a
    whole node's GPUs (the usual 8) can only land on a node of its own anyway,
    smaller workers that share a node talk faster (NVLink, shared memory) than
    across the network, and a required rule would leave workers Pending
    whenever there are fewer free nodes than workers.
    """
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        "backoffLimit": spec.retries,
    }
    if spec.max_runtime_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    job_spec["template"] = _pod_template(
        spec,
        ctx,
        restart_policy="Never",
        subdomain=object_name(spec, ctx),
        portal_env=_distributed_env(spec, ctx),
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec, ctx),
        "spec": job_spec,
    }


# The training operator finds the training container (its port, its env) by this name.
PYTORCH_CONTAINER = "pytorch"


def _pytorchjob(spec: JobSpec, ctx: ManifestContext) -> Manifest:
    """Kubeflow's PyTorchJob (seed 003's shape): a Master and ``workers - 1`` Workers, each
    pod the portal's restricted template; the operator gives each pod its Service and
    torchrun's env (MASTER_ADDR, WORLD_SIZE, RANK, PET_*).

    Without retries, pods are not restarted (``Never``) and no ``backoffLimit`` is set: a
    failed rank fails the job and its pods stay, with the exit code (the operator deletes
    every pod of a job past its backoff limit, whatever ``cleanPodPolicy`` says). The
    portal runs it again when a GPU or a node failed (``jobs.services.hardware``), as for
    its own Jobs. With retries, the operator restarts a failed rank in place
    (``OnFailure``) up to ``backoffLimit`` times: the only restarts it counts."""
    restart = "OnFailure" if spec.retries else "Never"
    template = _pod_template(spec, ctx, restart_policy=restart)
    template["spec"]["containers"][0]["name"] = PYTORCH_CONTAINER
    replicas: dict[str, Any] = {
        "Master": {"replicas": 1, "restartPolicy": restart, "template": template}
    }
    if spec.workers > 1:
        replicas["Worker"] = {
            "replicas": spec.workers - 1,
            "restartPolicy": restart,
            "template": copy.deepcopy(template),
        }
    run_policy: dict[str, Any] = {"cleanPodPolicy": "None"}
    if spec.retries:
        run_policy["backoffLimit"] = spec.retries
    if spec.max_runtime_seconds is not None:
        run_policy["activeDeadlineSeconds"] = spec.max_runtime_seconds
    whole = spec.gpu.sharing == "exclusive" and not spec.gpu.mig_profile and spec.gpu.count
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _metadata(spec, ctx),
        "spec": {
            "runPolicy": run_policy,
            # torchrun's processes per pod: one per whole GPU, else one.
            "nprocPerNode": str(spec.gpu.count if whole else 1),
            "pytorchReplicaSpecs": replicas,
        },
    }


# What a runtime patch may set on a pod (Trainer v2.3's PodSpecPatch, beside the trainer's
# own fields): the portal's pod template gives these; the rest is the runtime's.
_POD_PATCH_FIELDS = ("affinity", "tolerations", "volumes", "securityContext", "nodeSelector")


def _trainjob(spec: JobSpec, ctx: ManifestContext) -> Manifest:
    """Kubeflow Trainer's TrainJob on the ``ctx.training_runtime`` ClusterTrainingRuntime:
    the trainer (image, command, env, ``numNodes`` = workers, ``resourcesPerNode``) and a
    runtime patch giving the trainer's pods the portal's labels, GPU placement, volumes and
    restricted security context. Trainer sets torchrun's env (``PET_*``) itself.

    What a patch cannot set stays the runtime's: the pods' PriorityClass (admission order
    is the portal's or Kueue's either way), ``enableServiceLinks`` and
    ``automountServiceAccountToken`` (the pods run as the team's tokenless ServiceAccount
    instead; docs/jobs.md, "TrainJob")."""
    template = _pod_template(spec, ctx)
    pod, container = template["spec"], template["spec"]["containers"][0]
    trainer: dict[str, Any] = {
        "image": container["image"],
        "numNodes": spec.workers,
        "resourcesPerNode": container["resources"],
    }
    for field in ("command", "args", "env"):
        if container.get(field):
            trainer[field] = container[field]
    container_patch: dict[str, Any] = {
        "name": TRAINER_CONTAINER,
        "securityContext": container["securityContext"],
    }
    if container.get("volumeMounts"):
        container_patch["volumeMounts"] = container["volumeMounts"]
    pod_patch = {f: pod[f] for f in _POD_PATCH_FIELDS if f in pod}
    # A patch cannot turn the API token off: the pods run as the team's ServiceAccount that
    # mounts none (teams.cluster_sync), unless the runtime itself asks for one.
    pod_patch["serviceAccountName"] = WORKLOAD_SERVICE_ACCOUNT
    pod_patch["containers"] = [container_patch]
    replicated_job = {
        "name": TRAINER_JOB,
        "template": {"spec": {"template": {"metadata": template["metadata"], "spec": pod_patch}}},
    }
    trainjob_spec: dict[str, Any] = {
        "runtimeRef": {
            "name": ctx.training_runtime,
            "kind": "ClusterTrainingRuntime",
            "apiGroup": "trainer.kubeflow.org",
        },
        "trainer": trainer,
        "runtimePatches": [
            {
                "manager": TRAINER_PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
            }
        ],
    }
    if spec.max_runtime_seconds is not None:
        trainjob_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": _metadata(spec, ctx),
        "spec": trainjob_spec,
    }


def _deployment(spec: JobSpec, ctx: ManifestContext) -> Manifest:
    http_get = {"path": spec.health_path, "port": HTTP_PORT_NAME}
    container_extras: dict[str, Any] = {
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": spec.port, "protocol": "TCP"}],
        "startupProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": STARTUP_PERIOD_SECONDS,
            "failureThreshold": STARTUP_FAILURE_THRESHOLD,
        },
        "readinessProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": 30,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }
    # Preferred, not required: spreading replicas over nodes keeps the service
    # up when a node goes, but two replicas on one node beat one Pending.
    pod_anti_affinity = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": selector_labels(ctx)},
                    "topologyKey": HOSTNAME_TOPOLOGY_KEY,
                },
            }
        ]
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(spec, ctx),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(ctx)},
            "template": _pod_template(
                spec,
                ctx,
                container_extras=container_extras,
                pod_anti_affinity=pod_anti_affinity,
            ),
        },
    }


def _workspace(spec: JobSpec, ctx: ManifestContext) -> list[Manifest]:
    """The restricted pod template running the workspace image's server with its token
    (from the Secret) and the portal's path, then ``workspace_objects`` around it."""
    ws = ctx.workspace
    if ws is None:
        raise ValueError("a workspace needs ctx.workspace (its image, home and path)")
    name = object_name(spec, ctx)
    template = _pod_template(
        spec,
        ctx,
        portal_env=[token_env(ws, name)],
        container_extras=workspace_container_extras(ws),
    )
    container = template["spec"]["containers"][0]
    started = {"command": list(ws.command)} if ws.command else {}
    started["args"] = server_args(ws)
    template["spec"]["containers"][0] = {
        "name": container.pop("name"),
        "image": container.pop("image"),
        **started,
        **container,
    }
    return workspace_objects(_metadata(spec, ctx), template, ctx, selector_labels(ctx))


def _inference_service(spec: JobSpec, ctx: ManifestContext) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, ctx),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ctx),
            "ports": [
                {
                    "name": HTTP_PORT_NAME,
                    "protocol": "TCP",
                    "port": spec.port,
                    "targetPort": HTTP_PORT_NAME,
                }
            ],
        },
    }


# --- pod template --------------------------------------------------------------


def _pod_template(
    spec: JobSpec,
    ctx: ManifestContext,
    *,
    restart_policy: str | None = None,
    subdomain: str | None = None,
    portal_env: list[dict[str, Any]] | None = None,
    container_extras: dict[str, Any] | None = None,
    pod_anti_affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The pod template of every workload: one restricted container, its volumes, the
    GPU placement (affinity, toleration) and the priority class."""
    resources = container_resources(spec, ctx)
    has_gpu = gpu_resource_name(spec, ctx) is not None
    volumes, mounts = _volumes(spec, memory_limit=resources["limits"]["memory"], shm=has_gpu)
    container = _container(
        spec,
        resources=resources,
        mounts=mounts,
        env=_env(spec, [*(portal_env or []), *_checkpoint_env(spec, ctx)]),
        extras=dict(container_extras or {}),
    )
    pod_spec: dict[str, Any] = {}
    if subdomain is not None:
        pod_spec["subdomain"] = subdomain
    if restart_policy is not None:
        pod_spec["restartPolicy"] = restart_policy
    pod_spec["priorityClassName"] = priority_class_name(spec.priority)
    pod_spec["automountServiceAccountToken"] = False
    # Service links inject every Service of the namespace as env vars: noise
    # at best, and they can shadow the user's own variables.
    pod_spec["enableServiceLinks"] = False
    pod_spec["securityContext"] = _pod_security_context()
    affinity = _affinity(
        spec,
        has_gpu=has_gpu,
        pod_anti_affinity=pod_anti_affinity,
        excluded_nodes=ctx.excluded_nodes,
    )
    if affinity:
        pod_spec["affinity"] = affinity
    if has_gpu:
        # GPU nodes are tainted nvidia.com/gpu (any value) so that only pods
        # that need a GPU land there; only those pods get the toleration.
        pod_spec["tolerations"] = [{"key": ANY_GPU, "operator": "Exists", "effect": "NoSchedule"}]
    if spec.kind == "training" and ctx.node_failure_toleration_seconds is not None:
        # A training step waits on every worker: on a node that stopped responding the job
        # is stalled, not degraded, so it leaves sooner than the 300 s the API server would
        # give it and runs again elsewhere from its checkpoint (jobs.services.hardware).
        pod_spec.setdefault("tolerations", []).extend(
            {
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": ctx.node_failure_toleration_seconds,
            }
            for key in (NODE_NOT_READY, NODE_UNREACHABLE)
        )
    pod_spec["containers"] = [container]
    if volumes:
        pod_spec["volumes"] = volumes
    return {"metadata": {"labels": object_labels(spec, ctx)}, "spec": pod_spec}


def _volumes(
    spec: JobSpec, *, memory_limit: str, shm: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts: each claim, and /dev/shm for GPUs."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if spec.checkpoint is not None:
        volumes.append(
            {
                "name": CHECKPOINT_VOLUME_NAME,
                "persistentVolumeClaim": {"claimName": spec.checkpoint.claim},
            }
        )
        mounts.append({"name": CHECKPOINT_VOLUME_NAME, "mountPath": spec.checkpoint.mount_path})
    for index, volume in enumerate(spec.volumes):
        # Claim names may be DNS subdomains (dots, up to 253 characters);
        # volume names must be DNS labels, so number them instead.
        volume_name = f"pvc-{index}"
        volumes.append(
            {
                "name": volume_name,
                "persistentVolumeClaim": {"claimName": volume.claim, "readOnly": volume.read_only},
            }
        )
        mounts.append(
            {"name": volume_name, "mountPath": volume.mount_path, "readOnly": volume.read_only}
        )
    if shm:
        # Container runtimes give /dev/shm 64 MiB, far too little for PyTorch
        # DataLoader workers and NCCL; a memory-backed emptyDir replaces it.
        volumes.append(
            {
                "name": SHM_VOLUME_NAME,
                "emptyDir": {"medium": "Memory", "sizeLimit": shm_size_limit(memory_limit)},
            }
        )
        mounts.append({"name": SHM_VOLUME_NAME, "mountPath": "/dev/shm"})  # noqa: S108 - shm volume
    return volumes, mounts


def _container(
    spec: JobSpec,
    *,
    resources: dict[str, dict[str, str]],
    mounts: list[dict[str, Any]],
    env: list[dict[str, Any]],
    extras: dict[str, Any],
) -> dict[str, Any]:
    """The one container, with the restricted Pod Security Standard's settings."""
    container: dict[str, Any] = {"name": CONTAINER_NAME, "image": spec.image}
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if env:
        container["env"] = env
    if "ports" in extras:
        container["ports"] = extras.pop("ports")
    container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    container.update(extras)
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    }
    return container


def _pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": POD_UID,
        "runAsGroup": POD_GID,
        "fsGroup": POD_GID,
        # Without this the kubelet chowns every file of a dataset PVC on each
        # start, which can take longer than the job itself.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _affinity(
    spec: JobSpec,
    *,
    has_gpu: bool,
    pod_anti_affinity: dict[str, Any] | None,
    excluded_nodes: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Required node affinity to the GPU product and away from the nodes a GPU failed on,
    and the caller's pod anti-affinity."""
    affinity: dict[str, Any] = {}
    expressions: list[dict[str, Any]] = []
    # The GPU product only means something when GPUs are requested; spec
    # validation refuses a product without GPUs.
    if has_gpu and spec.gpu.product:
        expressions.append(
            {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": _product_label_values(spec)}
        )
    if excluded_nodes:
        expressions.append(
            {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(set(excluded_nodes))}
        )
    if expressions:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    if pod_anti_affinity is not None:
        affinity["podAntiAffinity"] = pod_anti_affinity
    return affinity


def _checkpoint_env(spec: JobSpec, ctx: ManifestContext) -> list[dict[str, Any]]:
    """The checkpoint contract: where checkpoints go, and which run this is (0 first)."""
    if spec.checkpoint is None:
        return []
    return [
        {"name": "CHECKPOINT_DIR", "value": spec.checkpoint.mount_path},
        {"name": "RESTART_ATTEMPT", "value": str(ctx.attempt)},
    ]


def _env(spec: JobSpec, portal_env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """User env vars plus the portal's own, sorted by name; the portal's win."""
    portal_names = {item["name"] for item in portal_env}
    user_env = [
        {"name": name, "value": value}
        for name, value in spec.env.items()
        if name not in portal_names
    ]
    return sorted(user_env + portal_env, key=lambda item: str(item["name"]))


def _distributed_env(spec: JobSpec, ctx: ManifestContext) -> list[dict[str, Any]]:
    """What ``torchrun`` (and plain ``torch.distributed``) reads from the environment.

    ``torchrun`` takes each of its flags from a ``PET_<FLAG>`` variable, so with
    these set ``torchrun train.py`` needs no flags at all.
    """
    name = object_name(spec, ctx)
    # Pod hostname is <job>-<index>; with subdomain=<service> it resolves as
    # <job>-<index>.<service> in the pod's namespace.
    master_addr = f"{name}-0.{name}"
    nproc_per_node = max(1, spec.gpu.count)
    return [
        {"name": "MASTER_ADDR", "value": master_addr},
        {"name": "MASTER_PORT", "value": str(ctx.master_port)},
        {"name": "WORLD_SIZE", "value": str(spec.workers)},
        _completion_index_env("NODE_RANK"),
        _completion_index_env("RANK"),
        {"name": "PET_MASTER_ADDR", "value": master_addr},
        {"name": "PET_MASTER_PORT", "value": str(ctx.master_port)},
        {"name": "PET_NNODES", "value": str(spec.workers)},
        _completion_index_env("PET_NODE_RANK"),
        {"name": "PET_NPROC_PER_NODE", "value": str(nproc_per_node)},
    ]


def _completion_index_env(name: str) -> dict[str, Any]:
    """An env var holding the pod's Indexed Job completion index (0 … workers-1)."""
    field_path = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _product_label_values(spec: JobSpec) -> list[str]:
    """Node label values that mean "this GPU product".

    GPU Feature Discovery appends ``-SHARED`` to the product label of nodes whose GPUs
    are time-sliced, so a shared-GPU job asking for ``Tesla-T4`` must also match
    ``Tesla-T4-SHARED``; an exclusive job must not land on a shared GPU.
    """
    product = spec.gpu.product or ""
    if spec.gpu.sharing == "shared":
        return [product, f"{product}-SHARED"]
    return [product]
