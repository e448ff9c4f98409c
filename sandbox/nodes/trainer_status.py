"""What a TrainJob's training code reports through Kubeflow Trainer's status server: rank 0's
progress, written to the TrainJob's ``status.trainerStatus``.

With Trainer's alpha ``TrainJobStatus`` gate on, Trainer gives each trainer container the
status server's URL and a projected token, the training code POSTs its progress there, and
the status server applies it to the TrainJob's status (server-side apply, field manager
``trainer-status``, forced). The status server cannot run on the local cluster: it listens
on every interface (``:<port>``, the local cluster listens on loopback only) and reads its
token issuer from ``/var/run/secrets/kubernetes.io/serviceaccount/token``, a file only a pod
has. So the gate stays off, and the simulated training code of a TrainJob's rank-0 pod makes
the status server's write itself: the same fields, the same field manager, through the real
API server (Trainer v2.3's CRD validates them). Percent, steps and the time left are those
of the simulated run (``sandbox.logs``), as its log lines say.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from kubernetes.client.rest import ApiException

from sandbox.logs import step_seconds, total_steps
from sandbox.nodes.store import Api
from sandbox.state import Cluster
from sandbox.store import Obj

log = logging.getLogger("sandbox.nodes")

TRAINER_API = "/apis/trainer.kubeflow.org/v1alpha1"
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Trainer marks the runtime's replicated job that runs the training code with this label.
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
FIELD_MANAGER = "trainer-status"


class TrainerStatus:
    """Rank 0 of each TrainJob on these nodes reports its progress when its percent moves."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._reported: dict[str, int] = {}  # pod uid -> percent last written
        self._trainer_job: dict[str, str | None] = {}  # "<ns>/<JobSet>" -> trainer's job

    def reconcile(self, cluster: Cluster) -> None:
        pods = list(cluster.store.iter("pods"))
        # Forget what was reported for pods that are gone (a long run sees many)
        live = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self._reported if u not in live]:
            del self._reported[uid]
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(COMPLETION_INDEX) != "0" or labels.get(JOB_INDEX) != "0":
                continue
            trainjob = labels.get(JOBSET_NAME)
            if not trainjob or pod["metadata"].get("deletionTimestamp"):
                continue
            namespace = pod["metadata"]["namespace"]
            if labels.get(REPLICATED_JOB) != self._trainer_job_of(namespace, trainjob):
                continue
            percent_status = _progress(cluster, pod)
            uid = pod["metadata"]["uid"]
            if percent_status is None or self._reported.get(uid) == percent_status[0]:
                continue
            if self._apply(namespace, trainjob, percent_status[1]):
                self._reported[uid] = percent_status[0]

    def _trainer_job_of(self, namespace: str, jobset: str) -> str | None:
        """The JobSet's replicated job that runs the trainer (Trainer labels its template)."""
        key = f"{namespace}/{jobset}"
        if key not in self._trainer_job:
            try:
                path = f"{JOBSET_API}/namespaces/{namespace}/jobsets/{jobset}"
                found = self.api.call("GET", path)
            except ApiException:
                return None  # not a JobSet any more, or not yet readable: asked again later
            self._trainer_job[key] = next(
                (
                    r["name"]
                    for r in found["spec"].get("replicatedJobs") or []
                    if (((r.get("template") or {}).get("metadata") or {}).get("labels") or {}).get(
                        ANCESTOR_LABEL
                    )
                    == TRAINER_STEP
                ),
                None,
            )
        return self._trainer_job[key]

    def _apply(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        body = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"trainerStatus": status},
        }
        try:
            self.api.call(
                "PATCH",
                f"{TRAINER_API}/namespaces/{namespace}/trainjobs/{name}/status",
                body,  # JSON, which is YAML
                [("fieldManager", FIELD_MANAGER), ("force", "true")],
                content_type="application/apply-patch+yaml",
            )
            return True
        except ApiException as exc:
            if exc.status == 404:  # a JobSet of no TrainJob, or the TrainJob is gone
                return True
            # Refused (the training code's report is not valid): the status server would
            # have answered the same; the next percent is tried. Else the server is away.
            log.warning("trainerStatus of %s/%s not written: %s", namespace, name, exc.reason)
            return exc.status is not None and 400 <= exc.status < 500


def _progress(cluster: Cluster, pod: Obj) -> tuple[int, dict[str, Any]] | None:
    """Rank 0's percent and ``trainerStatus`` now, once it has made a step."""
    life = cluster.store.meta_get(f"life/{pod['metadata']['uid']}") or {}
    if life.get("started") is None or life.get("kind", "training") != "training":
        return None
    planned = float(life.get("planned") or life.get("duration") or 60)
    every, total = step_seconds(planned), total_steps(planned)
    end = float(life["finished"]) if life.get("finished") is not None else cluster.now()
    done = int((end - float(life["started"])) // every)
    step = min(total, int(life.get("resume_step", 0)) + done)
    if step <= 0:
        return None
    percent = min(100, int(100 * step / total))
    return percent, {
        "progressPercentage": percent,
        # The trainer's own seconds: the wall clock's, as every timestamp the API gives.
        "estimatedRemainingSeconds": int((total - step) * every / cluster.clock.speed),
        "metrics": [{"name": "step", "value": str(step)}, {"name": "total", "value": str(total)}],
        "lastUpdatedTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
