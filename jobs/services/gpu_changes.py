"""Changing a node's MIG layout from the portal, start to finish (docs/gpu-operator.md).

``gpu_change_start`` checks the change and records it (one under way per node, audited);
``gpu_change_step`` drives it, one step per call, safe to run twice (the task calls it
until it says done):

1. **Draining.** Cordon the node (nothing new lands on it), then, as the admin chose,
   move the portal's jobs with GPU pods on it through the eviction path (re-queued at
   their place, nothing lost, each told why) or wait for them to finish. Once no pod
   holds a GPU there, set ``nvidia.com/mig.config`` (and clear the state label, so the
   ``success`` read afterwards answers this change, not the last).
2. **Applying.** Follow ``nvidia.com/mig.config.state``: ``success`` → uncordon (unless an
   admin had cordoned it), done, the catalog refreshed; ``failed`` → uncordon, failed
   with the MIG manager's reason (its log). No answer within ``MIG_CHANGE_TIMEOUT``:
   failed, uncordoned, the label left for the admin to look at.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from cluster import kube
from cluster.gpu_operator import cluster_policy, mig_manager_reason
from cluster.models import GpuChange
from cluster.nodes import cluster_error_text
from cluster.tasks import catalog_refresh_task
from core.errors import ApplicationError, ClusterUnavailable, Conflict
from jobs.models import ACTIVE_STATES, Job, JobState
from jobs.selectors.gpu_changes import MigPreview, gpu_holders, mig_preview
from jobs.services.transitions import job_transition
from jobs.tasks import evict_enqueue, gpu_change_enqueue
from scheduling.gpu_operator import MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from teams.services import audit_record

MIG_CHANGE_TIMEOUT = timedelta(minutes=20)
RESHAPE_REASON = "NodeReshape"


def gpu_change_start(*, actor: User, node: str, layout: str, displace: str) -> GpuChange:
    """Start re-partitioning ``node`` as ``layout``; ``displace`` says what happens to the
    jobs on it (``evict`` or ``wait``). Raises ``ApplicationError`` naming what is wrong
    (an unknown layout, one the GPUs cannot take), ``Conflict`` when the node already has a
    change under way."""
    if displace not in GpuChange.Displace.values:
        raise ApplicationError(
            "displace: evict (move its jobs away now) or wait (for them to finish)",
            field_errors={"displace": ["Choose evict or wait."]},
        )
    preview = mig_preview(node=node, layout=layout)
    if preview.problem:
        raise ApplicationError(preview.problem, field_errors={"layout": [preview.problem]})
    try:
        obj = kube.get("Node", node)
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc
    labels = obj["metadata"].get("labels") or {}
    if labels.get(MIG_CONFIG_STATE_LABEL) in ("pending", "rebooting"):
        raise Conflict(
            f"node {node}: the MIG manager is still applying {labels.get(MIG_CONFIG_LABEL)} "
            f"({labels.get(MIG_CONFIG_STATE_LABEL)}); wait until it has finished"
        )
    try:
        with transaction.atomic():
            change = GpuChange.objects.create(
                node=node,
                kind=GpuChange.Kind.MIG,
                old_value=preview.old_layout,
                new_value=layout,
                displace=displace,
                was_cordoned=bool((obj.get("spec") or {}).get("unschedulable")),
                requested_by=actor,
                message=_draining_words(preview, displace),
            )
            audit_record(
                actor=actor,
                action="gpu.mig_layout",
                target=f"node/{node}",
                changes={
                    "node": node,
                    MIG_CONFIG_LABEL: [preview.old_layout, layout],
                    "displace": displace,
                    "jobs": [j.id for j in preview.jobs],
                },
            )
            gpu_change_enqueue(change_id=change.pk)
    except IntegrityError as exc:
        under_way = GpuChange.objects.filter(node=node, state__in=GpuChange.ACTIVE).first()
        what = f" ({under_way.new_value}, state {under_way.state})" if under_way else ""
        raise Conflict(
            f"node {node} already has a change under way{what}; wait for it to finish"
        ) from exc
    return change


def _draining_words(preview: MigPreview, displace: str) -> str:
    count = len(preview.jobs)
    if not count:
        return "Cordoned; no job holds its GPUs."
    jobs = f"{count} job{'s' if count != 1 else ''}"
    if displace == GpuChange.Displace.EVICT:
        return f"Cordoned; moving {jobs} away (re-queued, nothing lost)."
    return f"Cordoned; waiting for {jobs} to finish."


def gpu_change_step(*, change_id: int) -> bool:
    """One step of a change (see the module). True when it is over (or not found)."""
    change = GpuChange.objects.filter(pk=change_id).select_related("requested_by").first()
    if change is None or not change.active:
        return True
    try:
        if change.state == GpuChange.State.DRAINING:
            _drain(change)
            return False
        return _follow(change)
    except kube.ClusterError:
        return False  # the cluster did not answer: the next step tries again


def _drain(change: GpuChange) -> None:
    node = kube.get("Node", change.node)
    if not (node.get("spec") or {}).get("unschedulable"):
        kube.cordon(change.node)
    pods = list(kube.list_all("Pod", field_selector=f"spec.nodeName={change.node}"))
    jobs, others = gpu_holders(pods)
    if change.displace == GpuChange.Displace.EVICT:
        moved = [j.id for j in jobs if _move(j.id, change)]
        if moved:
            GpuChange.objects.filter(pk=change.pk).update(
                displaced=sorted({*change.displaced, *moved})
            )
    if jobs or others:
        held = [f"job {j.id} ({j.name})" for j in jobs] + [f"pod {p}" for p in others]
        verb = "moving away" if change.displace == GpuChange.Displace.EVICT else "waiting for"
        _update(change, message=f"Cordoned; {verb}: {', '.join(held)}.")
        return
    kube.label_node(change.node, {MIG_CONFIG_LABEL: change.new_value, MIG_CONFIG_STATE_LABEL: None})
    _update(
        change,
        state=GpuChange.State.APPLYING,
        labelled_at=timezone.now(),
        message=f"{MIG_CONFIG_LABEL}={change.new_value} set; the MIG manager is re-partitioning.",
    )


def _move(job_id: int, change: GpuChange) -> bool:
    """Send one job back to the queue through the eviction path, saying why."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.evicted_at is not None:
        return False
    who = change.requested_by.get_username() if change.requested_by else "a platform admin"
    message = (
        f"Moved off node {change.node}: {who} is re-partitioning its GPUs as "
        f"{change.new_value}. Back in the queue at its place; it runs again elsewhere."
    )
    moved = job_transition(
        job=job,
        where={"state__in": ACTIVE_STATES, "evicted_at__isnull": True},
        changes={
            "state": JobState.QUEUED,
            "reason": RESHAPE_REASON,
            "message": message,
            "evicted_at": timezone.now(),
            "evictions": job.evictions + 1,
        },
        event_reason=RESHAPE_REASON,
        event_message=message,
        event_type="Warning",
    )
    if moved:
        evict_enqueue(job_id=job.pk)
    return moved


def _follow(change: GpuChange) -> bool:
    node = kube.get("Node", change.node)
    labels = node["metadata"].get("labels") or {}
    state = labels.get(MIG_CONFIG_STATE_LABEL, "")
    if labels.get(MIG_CONFIG_LABEL) != change.new_value:
        return _finish(
            change,
            GpuChange.State.FAILED,
            f"{MIG_CONFIG_LABEL} was changed to {labels.get(MIG_CONFIG_LABEL) or 'nothing'} "
            "by someone else while the MIG manager worked; the node is uncordoned.",
        )
    if state == "success":
        return _finish(
            change,
            GpuChange.State.SUCCEEDED,
            f"Re-partitioned as {change.new_value}; the node is schedulable again.",
        )
    if state == "failed":
        namespace = cluster_policy().namespace
        reason = mig_manager_reason(change.node, namespace) or "it logged no reason"
        return _finish(
            change,
            GpuChange.State.FAILED,
            f"The MIG manager failed: {reason}. The node is uncordoned with its old layout.",
        )
    assert change.labelled_at is not None
    if timezone.now() - change.labelled_at > MIG_CHANGE_TIMEOUT:
        minutes = int(MIG_CHANGE_TIMEOUT.total_seconds() // 60)
        return _finish(
            change,
            GpuChange.State.FAILED,
            f"The MIG manager did not finish within {minutes} minutes (state "
            f"{state or 'not reported'}); the node is uncordoned. Check its pod's log.",
        )
    return False


def _finish(change: GpuChange, state: str, message: str) -> bool:
    if not change.was_cordoned:
        kube.cordon(change.node, unschedulable=False)
    _update(change, state=state, message=message, finished_at=timezone.now())
    if state == GpuChange.State.SUCCEEDED:
        transaction.on_commit(catalog_refresh_task.delay)
    return True


def _update(change: GpuChange, **fields: object) -> None:
    """Write the change's progress, only while it is still where this step found it."""
    GpuChange.objects.filter(pk=change.pk, state=change.state).update(**fields)


def gpu_changes_active() -> list[int]:
    """Ids of the changes under way (the safety net queues a step for each)."""
    return list(GpuChange.objects.filter(state__in=GpuChange.ACTIVE).values_list("pk", flat=True))
