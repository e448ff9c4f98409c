"""Reads about workspaces: where a running workspace's server answers (its ready pod's
address, as the proxy and the activity reader reach it)."""

from __future__ import annotations

from dataclasses import dataclass

from cluster import kube
from cluster.labels import JOB_ID_LABEL
from jobs.models import Job, JobState


@dataclass(frozen=True)
class Endpoint:
    """A workspace server's address: its pod's IP and container port, and the path the
    server is served under (``/workspaces/<id>/``)."""

    pod: str
    ip: str
    port: int

    def url(self, path: str) -> str:
        return f"http://{self.ip}:{self.port}{path}"


def _ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def workspace_endpoint(*, job: Job) -> Endpoint | None:
    """The ready pod serving a running workspace (None: not running, or no pod is ready
    yet). Raises ``kube.ClusterError`` when the cluster cannot say."""
    if job.kind != Job.Kind.WORKSPACE or job.state != JobState.RUNNING:
        return None
    pods = kube.list_all("Pod", namespace=job.namespace, label_selector=f"{JOB_ID_LABEL}={job.pk}")
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or not _ready(pod) or (pod["metadata"].get("deletionTimestamp")):
            continue
        ports = pod["spec"]["containers"][0].get("ports") or []
        if ports:
            return Endpoint(pod["metadata"]["name"], ip, int(ports[0]["containerPort"]))
    return None
