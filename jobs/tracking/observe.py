"""Turn what the cluster says about a job into the portal's state (pure functions).

Input is plain Kubernetes JSON (the Job or Deployment, its pods); output is an
``Observation``. No I/O, so every mapping is unit-tested with hand-written objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobs.models import JobState
from scheduling.k8s_time import parse_time

Obj = dict[str, Any]

UNSCHEDULABLE = "Unschedulable"


TAINT_EVICTION = "DeletionByTaintManager"


@dataclass(frozen=True)
class EvictedPod:
    """A pod the taint manager deleted because its node stopped responding."""

    pod: str
    node: str
    at: datetime | None

    def as_json(self) -> dict[str, str]:
        return {"pod": self.pod, "node": self.node, "at": self.at.isoformat() if self.at else ""}


@dataclass
class Observation:
    state: str
    reason: str
    message: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    placement: dict[str, Any] = field(default_factory=dict)
    unschedulable_pod: Obj | None = None  # a pod the scheduler could not place
    node_evictions: tuple[EvictedPod, ...] = ()  # why it failed: its node stopped responding
    admitted_at: datetime | None = None  # Kueue mode: when Kueue admitted its Workload


def node_evictions(pods: list[Obj]) -> tuple[EvictedPod, ...]:
    """Pods evicted from a node that stopped responding: the taint manager's
    ``DisruptionTarget`` condition (``DeletionByTaintManager``), set when the pod has
    tolerated ``node.kubernetes.io/unreachable`` (or ``not-ready``) for its
    ``tolerationSeconds``."""
    found = []
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == "DisruptionTarget"
                and condition.get("status") == "True"
                and condition.get("reason") == TAINT_EVICTION
            ):
                found.append(
                    EvictedPod(
                        pod=str(pod["metadata"]["name"]),
                        node=str((pod.get("spec") or {}).get("nodeName") or "?"),
                        at=parse_time(condition.get("lastTransitionTime")),
                    )
                )
    return tuple(sorted(found, key=lambda e: e.pod))


def true_conditions(obj: Obj) -> dict[str, Obj]:
    """An object's conditions that hold now, by type."""
    return {
        c["type"]: c
        for c in (obj.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _unschedulable(pod: Obj) -> Obj | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == UNSCHEDULABLE
        ):
            return condition
    return None


def _waiting_reason(pod: Obj) -> str | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return str(waiting.get("reason") or "ContainerCreating")
    return None


def _terminated(pod: Obj) -> list[Obj]:
    found = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            found.append({"container": status.get("name"), **terminated})
    return found


def placement_of(pods: list[Obj]) -> dict[str, Any]:
    live = [p for p in pods if p.get("spec", {}).get("nodeName")]
    return {
        "nodes": sorted({p["spec"]["nodeName"] for p in live}),
        "pods": [
            {
                "name": p["metadata"]["name"],
                "node": p.get("spec", {}).get("nodeName") or "",
                "phase": _phase(p),
            }
            for p in sorted(pods, key=lambda p: p["metadata"]["name"])
        ],
    }


def _event_time(event: Obj) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


def _pending(pods: list[Obj], expected: int, what: str, events: list[Obj]) -> Observation:
    """Why pods are not all running yet, most specific reason first."""
    running = sum(1 for p in pods if _phase(p) == "Running")
    for pod in pods:
        condition = _unschedulable(pod)
        if condition is not None:
            return Observation(
                JobState.PENDING,
                UNSCHEDULABLE,
                str(condition.get("message") or "The scheduler cannot place a pod."),
                unschedulable_pod=pod,
            )
    # A pod the API server refused (a quota, Pod Security): the Job controller's
    # FailedCreate, a training operator's FailedCreatePod. It explains the missing pods
    # when none exists, or when it came after the newest one was made.
    failed_create = [e for e in events if e.get("reason") in ("FailedCreate", "FailedCreatePod")]
    if failed_create:
        latest = max(failed_create, key=_event_time)
        newest_pod = max((p["metadata"].get("creationTimestamp") or "" for p in pods), default="")
        if not pods or (len(pods) < expected and _event_time(latest) > newest_pod):
            message = str(latest.get("message") or "")
            reason = "QuotaExceeded" if "exceeded quota" in message else "FailedCreate"
            return Observation(JobState.PENDING, reason, message)
    for pod in pods:
        waiting = _waiting_reason(pod)
        if waiting and waiting != "ContainerCreating":
            return Observation(
                JobState.PENDING, waiting, f"Pod {pod['metadata']['name']}: {waiting}."
            )
    if running:
        return Observation(JobState.PENDING, "Starting", f"{running} of {expected} {what} running.")
    if pods:
        return Observation(JobState.PENDING, "ContainerCreating", f"Starting {len(pods)} pod(s).")
    return Observation(
        JobState.PENDING, "WaitingForPods", "Waiting for the controller to create pods."
    )


def observe_training(job: Obj, pods: list[Obj], events: list[Obj]) -> Observation:
    """batch/v1 Job → state. Complete/SuccessCriteriaMet = succeeded; Failed/FailureTarget
    = failed (with the exit code); otherwise running once every worker runs."""
    status = job.get("status") or {}
    conditions = true_conditions(job)
    placement = placement_of(pods)
    started = parse_time(status.get("startTime"))
    for kind in ("Complete", "SuccessCriteriaMet"):
        if kind in conditions:
            return _succeeded(conditions[kind], status, started, placement, "Job completed.")
    for kind in ("Failed", "FailureTarget"):
        if kind in conditions:
            return _failed(conditions[kind], pods, started, placement)
    observation = _unfinished(job, pods, events, started)
    observation.placement = placement
    return observation


def _succeeded(
    condition: Obj,
    status: Obj,
    started: datetime | None,
    placement: dict[str, Any],
    default: str,
) -> Observation:
    """A workload its controller says succeeded (its condition's reason and message)."""
    return Observation(
        JobState.SUCCEEDED,
        str(condition.get("reason") or "Completed"),
        str(condition.get("message") or default),
        started_at=started,
        finished_at=parse_time(status.get("completionTime"))
        or parse_time(condition.get("lastTransitionTime")),
        exit_code=0,
        placement=placement,
    )


def _failed(
    condition: Obj, pods: list[Obj], started: datetime | None, placement: dict[str, Any]
) -> Observation:
    """A failed Job, with the exit code of the container that failed last."""
    exit_code, detail = None, ""
    failures = [t for p in pods for t in _terminated(p) if t.get("exitCode")]
    if failures:
        last = max(failures, key=lambda t: t.get("finishedAt") or "")
        exit_code = int(last["exitCode"])
        detail = (
            f" Container {last.get('container')} exited with code {exit_code}"
            f" ({last.get('reason') or 'Error'})."
        )
    return Observation(
        JobState.FAILED,
        str(condition.get("reason") or "Failed"),
        str(condition.get("message") or "Job failed.").rstrip(".") + "." + detail,
        started_at=started,
        finished_at=parse_time(condition.get("lastTransitionTime")),
        exit_code=exit_code,
        placement=placement,
        node_evictions=node_evictions(pods),
    )


def _unfinished(
    job: Obj, pods: list[Obj], events: list[Obj], started: datetime | None
) -> Observation:
    """A Job without a final condition yet: completing, failing, running or pending."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    expected = int(spec.get("parallelism") or 1)
    live = [p for p in pods if _phase(p) not in ("Succeeded", "Failed")]
    succeeded = int(status.get("succeeded") or 0) or sum(
        1 for p in pods if _phase(p) == "Succeeded"
    )
    if not live and succeeded:
        # Pods are done but the Job's Complete condition is not written yet: it is finishing,
        # not waiting for pods (going back to "pending" here would be a false flap).
        return Observation(
            JobState.RUNNING,
            "Completing",
            f"{succeeded} pod(s) succeeded; waiting for the Job to complete.",
            started_at=started,
        )
    failed = sum(1 for p in pods if _phase(p) == "Failed")
    if not live and failed > int(spec.get("backoffLimit", 6)) and started is not None:
        # Its pods failed past the backoff limit but the Job's FailureTarget is not written
        # yet: it is failing, not waiting for pods (the same false flap as above).
        return Observation(
            JobState.RUNNING,
            "Failing",
            f"{failed} pod(s) failed; waiting for the Job to fail.",
            started_at=started,
        )
    running = sum(1 for p in live if _phase(p) == "Running")
    if running and running >= min(expected, len(live) or expected):
        workers = "worker" if expected == 1 else "workers"
        return Observation(
            JobState.RUNNING,
            "Running",
            f"{running} of {expected} {workers} running.",
            started_at=started,
        )
    return _pending(live, expected, "workers", events)


def observe_pytorchjob(job: Obj, pods: list[Obj], events: list[Obj]) -> Observation:
    """Kubeflow's PyTorchJob → state: its operator's ``Succeeded`` / ``Failed`` conditions
    (with the failed rank's exit code); running once every replica's pod runs (or the
    operator says ``Running`` / ``Restarting``); otherwise pending, as a Job's pods are."""
    conditions = true_conditions(job)
    replicas = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    return _observe_operator(
        job,
        pods,
        events,
        done=conditions.get("Succeeded"),
        failed=conditions.get("Failed"),
        said=next((conditions[c] for c in ("Restarting", "Running") if c in conditions), None),
        expected=sum(int((r or {}).get("replicas") or 1) for r in replicas.values()) or 1,
        started=parse_time((job.get("status") or {}).get("startTime")),
        what=("replicas", "PyTorchJob"),
    )


def observe_trainjob(job: Obj, pods: list[Obj], events: list[Obj]) -> Observation:
    """Kubeflow Trainer's TrainJob → state: ``Complete`` / ``Failed`` (its JobSet's, with the
    failed node's exit code); Trainer has no running condition (kubeflow/trainer#2713), so
    running once every node's pod runs; otherwise pending, as a Job's pods are. It started
    when its first pod did."""
    conditions = true_conditions(job)
    starts = [
        t for p in pods if (t := parse_time((p.get("status") or {}).get("startTime"))) is not None
    ]
    return _observe_operator(
        job,
        pods,
        events,
        done=conditions.get("Complete"),
        failed=conditions.get("Failed"),
        said=None,
        expected=int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1),
        started=min(starts, default=None),
        what=("nodes", "TrainJob"),
    )


def _observe_operator(
    job: Obj,
    pods: list[Obj],
    events: list[Obj],
    *,
    done: Obj | None,
    failed: Obj | None,
    said: Obj | None,
    expected: int,
    started: datetime | None,
    what: tuple[str, str],
) -> Observation:
    """A training operator's object → state, from its final conditions (``done``,
    ``failed``), what it says of a run (``said``) and its pods (``expected`` of them)."""
    placement = placement_of(pods)
    status = job.get("status") or {}
    if done is not None:
        return _succeeded(done, status, started, placement, f"{what[1]} completed.")
    if failed is not None:
        return _failed(failed, pods, started, placement)
    live = [p for p in pods if _phase(p) not in ("Succeeded", "Failed")]
    running = sum(1 for p in live if _phase(p) == "Running")
    if running >= expected or (said is not None and running):
        return Observation(
            JobState.RUNNING,
            str((said or {}).get("reason") or "Running"),
            f"{running} of {expected} {what[0]} running ({what[1]}).",
            started_at=started,
            placement=placement,
        )
    observation = _pending(live, expected, what[0], events)
    observation.placement = placement
    return observation


def observe_inference(deployment: Obj, pods: list[Obj], events: list[Obj]) -> Observation:
    """apps/v1 Deployment → state: running while every replica is available."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    replicas = spec.get("replicas")
    wanted = 1 if replicas is None else int(replicas)
    available = int(status.get("availableReplicas") or 0)
    placement = placement_of(pods)
    conditions = true_conditions(deployment)
    if wanted == 0:
        # Scaled to zero (by the idle-GPU policy, or by hand): up, but serving nothing.
        return Observation(
            JobState.RUNNING,
            "ScaledToZero",
            "Scaled to zero replicas: it holds no GPUs and serves nothing until resumed.",
            placement=placement,
        )
    if available >= wanted and wanted > 0:
        return Observation(
            JobState.RUNNING,
            "Available",
            f"{available} of {wanted} replicas available.",
            placement=placement,
        )
    live = [p for p in pods if _phase(p) not in ("Succeeded", "Failed")]
    observation = _pending(live, wanted, "replicas", events)
    failure = conditions.get("ReplicaFailure")
    if failure and observation.reason in ("WaitingForPods", "ContainerCreating"):
        message = str(failure.get("message") or "")
        reason = "QuotaExceeded" if "exceeded quota" in message else "FailedCreate"
        observation = Observation(JobState.PENDING, reason, message)
    if available and observation.state == JobState.PENDING and observation.reason == "Starting":
        # Some replicas serve already: the service is up, degraded.
        observation = Observation(
            JobState.RUNNING, "Degraded", f"{available} of {wanted} replicas available."
        )
    observation.placement = placement
    return observation
