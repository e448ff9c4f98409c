"""Submit the demo jobs (once): running, finishing, failing, pending and queued for quota.

Durations and exit codes are the sandbox's env hints (``SANDBOX_DURATION``,
``SANDBOX_EXIT_CODE``, ``SANDBOX_IDLE``); a real cluster ignores them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from cluster.models import Cluster
from core.errors import ApplicationError
from jobs.models import Job
from jobs.services.submit import job_submit

PYTORCH = "nvcr.io/nvidia/pytorch:24.05-py3"
TRITON = "nvcr.io/nvidia/tritonserver:24.05-py3"

DEMO_JOBS: list[tuple[str, dict[str, Any]]] = [
    ("alice", {"team": "vision", "name": "resnet50-imagenet", "kind": "training",
               "image": PYTORCH, "command": ["torchrun", "train.py"],
               "args": ["--arch", "resnet50", "--epochs", "90"],
               "gpu": {"count": 4, "product": "NVIDIA-A100-SXM4-80GB"},
               "volumes": [{"claim": "imagenet", "mount_path": "/data", "read_only": True}],
               "env": {"SANDBOX_DURATION": "6h"}}),
    ("bob", {"team": "vision", "name": "vit-finetune", "kind": "training", "image": PYTORCH,
             "command": ["python", "finetune.py"], "priority": "high",
             "gpu": {"count": 2, "product": "NVIDIA-H100-80GB-HBM3"},
             "env": {"SANDBOX_DURATION": "15m"}}),
    ("alice", {"team": "vision", "name": "flaky-augment", "kind": "training", "image": PYTORCH,
               "command": ["python", "augment.py"], "gpu": {"count": 1},
               "env": {"SANDBOX_DURATION": "4m", "SANDBOX_EXIT_CODE": "1"}}),
    ("carol", {"team": "nlp", "name": "llama-serve", "kind": "inference", "image": TRITON,
               "gpu": {"count": 1, "product": "NVIDIA-A100-SXM4-80GB"}, "replicas": 2,
               "port": 8000, "health_path": "/v2/health/ready"}),
    ("carol", {"team": "nlp", "name": "bert-distill", "kind": "training", "image": PYTORCH,
               "gpu": {"count": 2, "product": "NVIDIA-A100-SXM4-80GB"}, "workers": 2,
               "env": {"SANDBOX_DURATION": "2h", "SANDBOX_IDLE": "true"}}),
    # Kubeflow's PyTorchJob (where the cluster runs the training operator; not on Kueue)
    ("carol", {"team": "nlp", "name": "gpt2-ddp", "kind": "training", "image": PYTORCH,
               "launcher": "pytorchjob", "gpu": {"count": 1, "product": "NVIDIA-A100-SXM4-80GB"},
               "workers": 2, "env": {"SANDBOX_DURATION": "45m"}}),
    # Kubeflow Trainer's TrainJob (where the cluster runs Trainer): two nodes on time-sliced
    # T4s; its progress and time to finish are what the trainer reports (trainerStatus).
    ("admin", {"team": "speech", "name": "whisper-finetune", "kind": "training",
               "image": PYTORCH, "command": ["torchrun", "finetune.py"], "launcher": "trainjob",
               "gpu": {"count": 1, "sharing": "shared"}, "workers": 2,
               "env": {"SANDBOX_DURATION": "40m"}}),
    # A JupyterLab for alice on a shared T4 slice: the sandbox runs a real jupyter-lab; open
    # it from Workspaces (through the portal's proxy) while logged in as alice.
    ("alice", {"team": "vision", "name": "notebook", "kind": "workspace",
               "workspace_image": "jupyter-pytorch", "cpu": "2", "memory": "8Gi",
               "gpu": {"count": 1, "product": "Tesla-T4", "sharing": "shared"}}),
    ("alice", {"team": "vision", "name": "detector-mig", "kind": "inference",
               "image": TRITON, "gpu": {"count": 1, "sharing": "mig", "mig_profile": "1g.10gb"},
               "replicas": 2, "port": 8000, "health_path": "/v2/health/ready"}),
    ("admin", {"team": "speech", "name": "whisper-serve", "kind": "inference", "image": TRITON,
               "gpu": {"count": 1, "sharing": "shared"}, "replicas": 2, "port": 8000,
               "health_path": "/v2/health/ready"}),
    ("alice", {"team": "vision", "name": "huge-preprocess", "kind": "training",
               "image": PYTORCH, "gpu": {"count": 0}, "cpu": "30", "memory": "64Gi",
               "workers": 3, "env": {"SANDBOX_DURATION": "12h"}}),
    ("bob", {"team": "vision", "name": "gpt-pretrain", "kind": "training", "image": PYTORCH,
             "gpu": {"count": 8, "product": "NVIDIA-A100-SXM4-80GB"},
             "env": {"SANDBOX_DURATION": "12h"}}),
    # Past vision's 16 GPUs: it runs on the 8 that robotics (idle) lends in cohort research,
    # marked borrowing, until dave submits a robotics job and reclaims them.
    ("bob", {"team": "vision", "name": "gpt-pretrain-2", "kind": "training", "image": PYTORCH,
             "gpu": {"count": 8, "product": "NVIDIA-H100-80GB-HBM3"},
             "env": {"SANDBOX_DURATION": "12h"}}),
    # And past what the cohort has on the first cluster: queued for quota there, saying why
    # (with make run's second cluster, vision's big jobs may have gone there and left room).
    ("alice", {"team": "vision", "name": "lr-sweep", "kind": "training", "image": PYTORCH,
               "gpu": {"count": 4}, "env": {"SANDBOX_DURATION": "30m"}, "cluster": "FIRST"}),
]  # fmt: skip
# With make run's second cluster (h100-east): one job named there, and one for any cluster,
# which goes where it starts now (vision's quota on the first is in use), saying why.
SECOND_CLUSTER_JOBS: list[tuple[str, dict[str, Any]]] = [
    ("bob", {"team": "vision", "name": "llm-eval-east", "kind": "training", "image": PYTORCH,
             "gpu": {"count": 2}, "cluster": "h100-east", "env": {"SANDBOX_DURATION": "3h"}}),
    ("alice", {"team": "vision", "name": "detr-anywhere", "kind": "training", "image": PYTORCH,
               "gpu": {"count": 4}, "env": {"SANDBOX_DURATION": "2h"}}),
    ("admin", {"team": "speech", "name": "tts-serve-east", "kind": "inference", "image": TRITON,
               "gpu": {"count": 1, "sharing": "shared"}, "replicas": 2, "port": 8000,
               "health_path": "/v2/health/ready", "cluster": "h100-east"}),
]  # fmt: skip


class Command(BaseCommand):
    help = "Submit the demo jobs (only once; `manage.py cluster_sync` mirrors the teams first)."

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("demo_jobs refuses to run with production settings.")
        if Job.objects.exists():
            self.stdout.write("Demo jobs already submitted.")
            return
        users = {u.username: u for u in User.objects.all()}
        jobs = DEMO_JOBS
        if Cluster.objects.filter(name="h100-east").exists():
            jobs = [*DEMO_JOBS, *SECOND_CLUSTER_JOBS]
        for username, spec in jobs:
            if spec.get("cluster") == "FIRST":
                spec = {**spec, "cluster": settings.CLUSTER_NAME}
            try:
                job = job_submit(user=users[username], data=spec)
            except ApplicationError as exc:
                self.stderr.write(f"{spec['name']}: {exc.message}")
                continue
            self.stdout.write(f"submitted {job.team.slug}/{job.name} #{job.pk}")
