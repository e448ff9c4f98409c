"""A training job's progress and time to finish: what a TrainJob's training code reports
through Kubeflow Trainer (``trainerStatus``), else what its rank-0 pod's log says
(``jobs.tracking.progress`` reads both; docs/jobs.md says what a script prints).

Beat reads the running training jobs' logs every ``PROGRESS_INTERVAL_SECONDS``: one list of
the portal's pods (and of its TrainJobs, where Trainer runs) and one tail of one log per
job, the least recently read first, at most ``PROGRESS_BATCH`` per pass, so the API
server's load is bounded whatever the number of jobs. A log that cannot be read (node
down, cluster away) leaves the last figures as they were: read again next time.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from cluster import kube
from cluster.labels import MANAGED_BY_SELECTOR
from cluster.launchers import owner_kinds
from cluster.services import on_cluster_row
from jobs.models import Job, JobState
from jobs.tracking.progress import (
    TRAINER_STATUS,
    progress_from_log,
    progress_from_trainer_status,
)
from jobs.tracking.reconcile import by_job

logger = logging.getLogger(__name__)

LOG_LINES = 400  # progress lines come every few steps: 400 lines cover the rate's window
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
Obj = dict[str, Any]


def rank_zero(pods: list[Obj]) -> Obj | None:
    """The pod of rank 0: index 0 of an Indexed Job, a PyTorchJob's master, else the job's
    only pod; running pods first, then the newest (a restarted rank's new pod)."""

    def rank(pod: Obj) -> tuple[bool, bool]:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        index = labels.get(INDEX_LABEL) or (meta.get("annotations") or {}).get(INDEX_LABEL, "0")
        if REPLICA_TYPE_LABEL in labels:  # a PyTorchJob's pods: its master is rank 0
            index = "0" if labels[REPLICA_TYPE_LABEL] == "master" else "1"
        return index != "0", (pod.get("status") or {}).get("phase") != "Running"

    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    # Newest first: ``min`` keeps the first of equals.
    live.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""), reverse=True)
    return min(live, key=rank) if live else None


def job_progress_refresh(*, job: Job, pods: list[Obj], trainjob: Obj | None = None) -> bool:
    """Store where the job stands: from its TrainJob's ``trainerStatus`` when the training
    code reports there, else from its rank-0 log; True when either says something."""
    now = timezone.now()
    status = ((trainjob or {}).get("status") or {}).get(TRAINER_STATUS) or {}
    found = progress_from_trainer_status(status, now) if status else None
    if found is None:
        pod = rank_zero(pods)
        if pod is None:
            return False
        try:
            text = kube.pod_log(
                pod["metadata"]["name"], job.namespace, tail_lines=LOG_LINES, timestamps=True
            )
        except kube.ClusterError as exc:
            logger.info("job %s: progress not read: %s", job.pk, exc.message)
            return False
        found = progress_from_log(text)
    if found is None:
        Job.objects.filter(pk=job.pk).update(progress_read_at=now)
        return False
    Job.objects.filter(pk=job.pk).update(
        progress=found.as_json(),
        eta_seconds=found.eta_seconds,
        eta_basis=found.eta_basis,
        progress_at=found.at,
        progress_read_at=timezone.now(),
    )
    return True


def jobs_progress_refresh() -> int:
    """One pass over the running training jobs (least recently read first); returns how
    many reported progress."""
    jobs = list(
        Job.objects.filter(kind=Job.Kind.TRAINING, state=JobState.RUNNING)
        .order_by(F("progress_read_at").asc(nulls_first=True), "pk")
        .only("pk", "namespace", "cluster_id")[: settings.PROGRESS_BATCH]
    )
    reported = 0
    by_cluster: dict[int | None, list[Job]] = defaultdict(list)
    for job in jobs:
        by_cluster[job.cluster_id].append(job)
    for cluster_id, found in by_cluster.items():
        with on_cluster_row(cluster_id):  # each cluster's pods, listed once a pass
            pods = by_job(kube.list_all("Pod", label_selector=MANAGED_BY_SELECTOR))
            trainjobs: dict[int, list[Obj]] = {}
            if "TrainJob" in owner_kinds():  # where the cluster runs Trainer
                trainjobs = by_job(kube.list_all("TrainJob", label_selector=MANAGED_BY_SELECTOR))
            reported += sum(
                job_progress_refresh(
                    job=job,
                    pods=pods.get(job.pk, []),
                    trainjob=next(iter(trainjobs.get(job.pk, [])), None),
                )
                for job in found
            )
    return reported
