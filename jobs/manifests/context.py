"""What the manifest builders need to know about the cluster and the job row."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.resources import SHARED_GPU


@dataclass(frozen=True)
class WorkspaceContext:
    """What a workspace's objects need beyond its spec: its workspace image's start command,
    port and home path, the owner's home claim, and the path the portal serves it under."""

    flavor: str  # "jupyter" or "code-server" (WorkspaceImage.Flavor)
    command: tuple[str, ...]
    port: int
    home_path: str
    home_claim: str
    base_url: str  # /workspaces/<job id>/


@dataclass(frozen=True)
class ManifestContext:
    """Per-job, per-cluster inputs that are not part of the user's ``JobSpec``.

    ``shared_gpu_resource`` is the resource name time-sliced GPUs are advertised
    under: ``nvidia.com/gpu.shared`` when the device plugin's time-slicing config
    has ``renameByDefault: true``, plain ``nvidia.com/gpu`` when it is false.
    """

    job_id: int
    namespace: str
    shared_gpu_resource: str = SHARED_GPU
    kubernetes_version: str = "1.33"
    # torchrun's default rendezvous port; any free port works as long as the
    # headless Service and the workers agree on it.
    master_port: int = 29500
    # Runs of the job after a GPU failure (RESTART_ATTEMPT), and the nodes it must avoid.
    attempt: int = 0
    excluded_nodes: tuple[str, ...] = ()
    # How long a training pod stays on a node that stopped responding before the taint
    # manager evicts it (None: the API server's default, 300 s).
    node_failure_toleration_seconds: int | None = None
    # With QUEUEING=kueue: the LocalQueue the job goes to (empty: the portal admits it).
    kueue_queue: str = ""
    # The ClusterTrainingRuntime a TrainJob runs on (TRAINJOB_RUNTIME).
    training_runtime: str = "gpu-portal-torch"
    # A workspace's image, home and path (None for the other kinds).
    workspace: WorkspaceContext | None = None
