""" "Will it fit?": place a job's pods on a snapshot of the cluster with the scheduling core.

Reads only: the cluster (nodes and bound pods, through the one adapter) and the
team's quota use. Answers one of ``fits``, ``preempts``, ``waits-for-quota``,
``waits``, ``never`` or ``unknown`` (cluster unreachable), with the reason.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from cluster import kube
from cluster.labels import JOB_ID_LABEL
from cluster.models import Cluster
from cluster.nodes import cluster_snapshot
from cluster.priority_classes import PRIORITY_CLASSES
from jobs.admission.decisions import admission_preview
from jobs.manifests.trainer import trainer_pods
from jobs.models import Job
from scheduling import (
    ClusterSnapshot,
    Pod,
    explain,
    pod_from_k8s,
    schedule,
)
from teams.models import Team

# One recent snapshot per cluster (a placement for ``any`` asks each in turn: a single entry
# was replaced at every turn and never hit, bench_placement).
_recent: dict[tuple[str, str, str, bool], tuple[float, ClusterSnapshot]] = {}
_recent_lock = threading.Lock()


def recent_cluster_snapshot() -> ClusterSnapshot:
    """A snapshot at most ``FIT_SNAPSHOT_TTL_SECONDS`` old, for the fit preview.

    The form asks "will it fit?" as the user types; listing every pod of a large cluster
    for each keystroke would load the API server for an answer that is approximate anyway.
    Callers get a copy-safe snapshot: the preview places pods on a fresh one each time.
    """
    ttl = float(settings.FIT_SNAPSHOT_TTL_SECONDS)
    cluster = kube.cluster_key()
    now = time.monotonic()
    with _recent_lock:
        found = _recent.get(cluster)
        if ttl > 0 and found is not None and now - found[0] < ttl:
            cached = found[1]
            return ClusterSnapshot(cached.nodes, cached.pods)
    snapshot = cluster_snapshot()
    with _recent_lock:
        # Those past their time go as a new one is kept (a cluster removed leaves nothing).
        for key in [k for k, (at, _) in _recent.items() if now - at >= ttl]:
            del _recent[key]
        _recent[cluster] = (now, snapshot)
    return ClusterSnapshot(snapshot.nodes, snapshot.pods)


def _pod_templates(manifest: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """(pod template, how many pods) of each kind of pod a manifest makes: a Job's
    workers, a Deployment's replicas, a PyTorchJob's replicas of each type, a TrainJob's
    nodes (the trainer's pod as Trainer makes it)."""
    kind, spec = manifest.get("kind"), manifest.get("spec") or {}
    if kind in ("Job", "Deployment"):
        return [(spec["template"], int(spec.get("parallelism") or spec.get("replicas") or 1))]
    if kind == "PyTorchJob":
        return [
            (replica["template"], int(replica.get("replicas") or 1))
            for replica in (spec.get("pytorchReplicaSpecs") or {}).values()
        ]
    if kind == "TrainJob":
        nodes = int((spec.get("trainer") or {}).get("numNodes") or 1)
        return [(pod, nodes) for _, pod in trainer_pods(manifest)]
    return []


def job_pods(manifests: list[dict[str, Any]]) -> list[Pod]:
    """The pods the job's workload will create (one per worker, replica or node)."""
    pods: list[Pod] = []
    for manifest in manifests:
        for template, count in _pod_templates(manifest):
            for _ in range(count):
                obj = copy.deepcopy(template)
                obj.setdefault("metadata", {})
                obj["metadata"]["name"] = f"{manifest['metadata']['name']}-preview-{len(pods)}"
                obj["metadata"]["namespace"] = manifest["metadata"].get("namespace", "default")
                pods.append(pod_from_k8s(obj, PRIORITY_CLASSES))
    return pods


@dataclass
class FitPreview:
    verdict: str  # fits | preempts | waits-for-quota | waits | never | unknown
    message: str
    nodes: list[str] = field(default_factory=list)
    preempted_jobs: list[int] = field(default_factory=list)
    scheduler_message: str = ""
    # What admission would do: nominal | borrowing | preempts | waits ("" when not asked).
    quota: str = ""
    ahead: int = 0  # waiting for quota: the team's queued jobs that go first


def job_fit_preview(
    *,
    manifests: list[dict[str, Any]],
    team: Team,
    demand: dict[str, int],
    kind: str = "training",
    priority: int = 0,
    cluster: Cluster | None = None,
) -> FitPreview:
    """Would the job start now on ``cluster`` (the one the Kubernetes adapter is bound to)?
    First the quota, as admission would decide it in the team's cohort there; then the
    cluster: pods are placed one after another on the same snapshot, so a 4-worker job
    must find room for all four."""
    quota = admission_preview(
        team_id=team.pk, kind=kind, priority=priority, demand=demand, cluster=cluster
    )
    if quota.kind == "waits":
        return FitPreview("waits-for-quota", quota.message, quota=quota.kind, ahead=quota.ahead)
    if quota.kind == "preempts":
        return FitPreview(
            "preempts", quota.message, preempted_jobs=list(quota.victims), quota=quota.kind
        )
    borrowing = f" {quota.message}" if quota.kind == "borrowing" else ""
    try:
        snapshot = recent_cluster_snapshot()
    except kube.ClusterError as exc:
        return FitPreview(
            "unknown",
            f"Cannot check the cluster now: {exc.message}"
            + (f"; {quota.message}" if borrowing else ""),
            quota=quota.kind,
        )

    pods = job_pods(manifests)
    placed: list[str] = []
    victims: list[Pod] = []
    for pod in pods:
        result = schedule(pod, snapshot)
        if result.node:
            snapshot.add_pod(pod, result.node)
            placed.append(result.node)
            continue
        if result.nominated_node:
            for victim in result.victims:
                snapshot.remove_pod(victim.key)
            victims.extend(result.victims)
            snapshot.add_pod(pod, result.nominated_node)
            placed.append(result.nominated_node)
            continue
        advice = explain(pod, result, snapshot)
        verdict = "waits" if advice.can_ever_fit else "never"
        return FitPreview(verdict, advice.text, scheduler_message=result.message, quota=quota.kind)
    if victims:
        job_ids = sorted(
            {
                int(v.labels[JOB_ID_LABEL])
                for v in victims
                if v.labels.get(JOB_ID_LABEL, "").isdigit()
            }
        )
        names = [f"{j.team.slug}/{j.name} #{j.pk}" for j in Job.objects.filter(pk__in=job_ids)]
        who = ", ".join(names) or ", ".join(v.key for v in victims)
        return FitPreview(
            "preempts",
            f"Fits on {', '.join(sorted(set(placed)))} by preempting lower-priority pods "
            f"of: {who}.{borrowing}",
            nodes=sorted(set(placed)),
            preempted_jobs=job_ids,
            quota=quota.kind,
        )
    if not pods:
        return FitPreview("fits", f"Nothing to schedule.{borrowing}", quota=quota.kind)
    return FitPreview(
        "fits",
        f"Fits now on {', '.join(sorted(set(placed)))}.{borrowing}",
        nodes=sorted(set(placed)),
        quota=quota.kind,
    )
