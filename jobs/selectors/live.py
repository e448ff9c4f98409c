"""A job as it is now in the cluster: its pods, their logs, and the page's live panel.

Reads the cluster through ``cluster.kube``; when it cannot be reached, the last state the
reconcile stored is shown with the error beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from cluster import kube
from cluster.nodes import cluster_error_text
from jobs.cluster_scope import in_job_cluster
from jobs.manifests import job_id_selector
from jobs.models import Job, JobEvent
from jobs.selectors.jobs import job_events
from jobs.selectors.queue_position import QueuePosition, job_queue_position


class LivePod(TypedDict):
    name: str
    node: str
    phase: str
    ready: bool | None  # None: not known (read from the stored placement)
    restarts: int | None
    state: str  # container state in words: "running", "waiting: ContainerCreating", …


def _container_state(status: dict[str, Any]) -> str:
    state = status.get("state") or {}
    if "running" in state:
        return "running"
    if "waiting" in state:
        return f"waiting: {(state['waiting'] or {}).get('reason') or 'ContainerCreating'}"
    if "terminated" in state:
        terminated = state["terminated"] or {}
        return (
            f"terminated: {terminated.get('reason') or 'Completed'}"
            f" (exit code {terminated.get('exitCode')})"
        )
    return ""


def _live_pod(obj: dict[str, Any]) -> LivePod:
    status = obj.get("status") or {}
    containers = status.get("containerStatuses") or []
    states = [s for s in (_container_state(c) for c in containers) if s]
    return LivePod(
        name=str(obj["metadata"]["name"]),
        node=str((obj.get("spec") or {}).get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        ready=bool(containers) and all(c.get("ready") for c in containers),
        restarts=sum(int(c.get("restartCount") or 0) for c in containers),
        state="; ".join(states),
    )


@in_job_cluster
def job_pods_live(*, job: Job) -> list[LivePod]:
    """The job's pods as the cluster reports them now, by name.

    Raises ``kube.ClusterError`` when the cluster cannot be read.
    """
    pods = kube.list_all("Pod", namespace=job.namespace, label_selector=job_id_selector(job.pk))
    return sorted((_live_pod(p) for p in pods), key=lambda p: p["name"])


def _stored_pods(job: Job) -> list[LivePod]:
    """The pods the reconciler last saw (``placement``), when the cluster is not asked."""
    return [
        LivePod(
            name=str(p.get("name", "")),
            node=str(p.get("node") or ""),
            phase=str(p.get("phase") or ""),
            ready=None,
            restarts=None,
            state="",
        )
        for p in (job.placement or {}).get("pods") or []
    ]


MAX_LOG_TAIL = 5000


@dataclass(frozen=True)
class PodLog:
    pod: str
    node: str
    log: str
    note: str = ""  # why there is no log for this pod (e.g. its container has not started)


@dataclass(frozen=True)
class JobLogs:
    pods: list[PodLog] = field(default_factory=list)
    error: str | None = None  # "cluster unreachable: …": the logs could not be read
    detail: str | None = None  # why there are no pods to read logs from


@in_job_cluster
def job_log_tail(*, job: Job, tail: int) -> JobLogs:
    """The last ``tail`` lines (bounded to 1..5000) of each of the job's pods.

    Never raises for cluster trouble: the result carries ``error`` instead, so a
    page or API can show "cluster unreachable: …" plainly.
    """
    tail = max(1, min(MAX_LOG_TAIL, tail))
    if job.applied_at is None:
        return JobLogs(detail="The job has not started: no pods exist yet, so there are no logs.")
    try:
        pods = job_pods_live(job=job)
    except kube.ClusterError as exc:
        return JobLogs(error=cluster_error_text(exc))
    logs: list[PodLog] = []
    for pod in pods:
        try:
            text = kube.pod_log(pod["name"], job.namespace, tail_lines=tail)
        except kube.ObjectNotFound:
            continue  # deleted since the list: nothing left to read
        except kube.PermanentClusterError as exc:
            # e.g. 400 "container … is waiting to start": the pod has no log yet.
            logs.append(PodLog(pod["name"], pod["node"], "", note=exc.message))
            continue
        except kube.ClusterError as exc:  # unreachable, or the credentials are refused
            return JobLogs(pods=logs, error=cluster_error_text(exc))
        # Bounded here too: a server that ignores tailLines must not flood the page.
        lines = text.splitlines()[-tail:]
        logs.append(PodLog(pod["name"], pod["node"], "\n".join(lines)))
    detail = None if logs else "No pods of this job are in the cluster (not created yet, or gone)."
    return JobLogs(pods=logs, detail=detail)


@dataclass(frozen=True)
class JobLive:
    """What the job page shows and refreshes while the job runs."""

    job: Job
    pods: list[LivePod]
    pods_error: str | None
    events: list[JobEvent]
    queue_position: QueuePosition | None


@in_job_cluster
def job_live_get(*, job: Job) -> JobLive:
    """State, pods, timeline and queue position of one job.

    Pods come from the cluster while the job is applied and not final (with ready,
    restarts and container state); otherwise, or when the cluster cannot be read,
    from what the reconciler last stored, with the error to show beside them.
    """
    pods, pods_error = _stored_pods(job), None
    if job.applied_at is not None and not job.is_final:
        try:
            pods = job_pods_live(job=job)
        except kube.ClusterError as exc:
            pods_error = cluster_error_text(exc)
    return JobLive(
        job=job,
        pods=pods,
        pods_error=pods_error,
        events=list(job_events(job=job)),
        queue_position=job_queue_position(job=job),
    )
