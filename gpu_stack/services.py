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

import re
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from cluster import kube
from cluster.gpu_operator_state import ClusterPolicyState, cluster_policy, mig_manager_reason
from cluster.models import GpuChange
from cluster.nodes import cluster_error_text
from cluster.tasks import catalog_refresh_task
from core.errors import ApplicationError, ClusterUnavailable, Conflict
from gpu_stack.selectors.changes import (
    MigPreview,
    SharingPreview,
    gpu_holders,
    mig_preview,
    node_get,
    sharing_preview,
)
from gpu_stack.tasks import gpu_change_enqueue
from jobs.models import Job
from jobs.services.eviction import job_requeue
from scheduling.gpu_operator_config import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_PRESENT_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    TimeSlicing,
    device_plugin_config_text,
    parse_device_plugin_config,
)
from scheduling.resources import ANY_GPU, SHARED_GPU
from teams.services import audit_record

MIG_CHANGE_TIMEOUT = timedelta(minutes=20)
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_REPLICAS = 48
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
    obj = node_get(node)
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
        under_way = GpuChange.objects.filter(node=node, phase__in=GpuChange.ACTIVE).first()
        what = f" ({under_way.new_value}, {under_way.phase})" if under_way else ""
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
        if change.phase == GpuChange.Phase.DRAINING:
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
        phase=GpuChange.Phase.APPLYING,
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
    return job_requeue(job=job, reason=RESHAPE_REASON, message=message)


def _follow(change: GpuChange) -> bool:
    node = kube.get("Node", change.node)
    if change.kind == GpuChange.Kind.TIME_SLICING:
        return _follow_plugin(change, node)
    labels = node["metadata"].get("labels") or {}
    state = labels.get(MIG_CONFIG_STATE_LABEL, "")
    if labels.get(MIG_CONFIG_LABEL) != change.new_value:
        return _finish(
            change,
            GpuChange.Phase.FAILED,
            f"{MIG_CONFIG_LABEL} was changed to {labels.get(MIG_CONFIG_LABEL) or 'nothing'} "
            "by someone else while the MIG manager worked; the node is uncordoned.",
        )
    if state == "success":
        return _finish(
            change,
            GpuChange.Phase.SUCCEEDED,
            f"Re-partitioned as {change.new_value}; the node is schedulable again.",
        )
    if state == "failed":
        namespace = cluster_policy().namespace
        reason = mig_manager_reason(change.node, namespace) or "it logged no reason"
        return _finish(
            change,
            GpuChange.Phase.FAILED,
            f"The MIG manager failed: {reason}. The node is uncordoned with its old layout.",
        )
    assert change.labelled_at is not None
    if timezone.now() - change.labelled_at > MIG_CHANGE_TIMEOUT:
        minutes = int(MIG_CHANGE_TIMEOUT.total_seconds() // 60)
        return _finish(
            change,
            GpuChange.Phase.FAILED,
            f"The MIG manager did not finish within {minutes} minutes (state "
            f"{state or 'not reported'}); the node is uncordoned. Check its pod's log.",
        )
    return False


def _finish(change: GpuChange, phase: str, message: str) -> bool:
    if not change.was_cordoned:
        kube.cordon(change.node, unschedulable=False)
    _update(change, phase=phase, message=message, finished_at=timezone.now())
    if phase == GpuChange.Phase.SUCCEEDED:
        transaction.on_commit(catalog_refresh_task.delay)
    return True


def _update(change: GpuChange, **fields: object) -> None:
    """Write the change's progress, only while it is still where this step found it."""
    GpuChange.objects.filter(pk=change.pk, phase=change.phase).update(**fields)


def gpu_changes_active() -> list[int]:
    """Ids of the changes under way (the safety net queues a step for each)."""
    return list(GpuChange.objects.filter(phase__in=GpuChange.ACTIVE).values_list("pk", flat=True))


# -- time-slicing: the device plugin's configs ----------------------------------------------------
PLUGIN_RESTART_TIMEOUT = timedelta(minutes=5)


def _plugin_map() -> tuple[dict[str, Any], ClusterPolicyState]:
    """The device plugin's ConfigMap (its name from the ClusterPolicy) and the policy.
    Raises ``ApplicationError`` when the operator has none."""
    policy = cluster_policy()
    if not policy.installed or not policy.plugin_config_map:
        raise ApplicationError(
            "the GPU Operator's ClusterPolicy names no device plugin ConfigMap "
            "(spec.devicePlugin.config.name): set one to change time-slicing here"
        )
    try:
        return kube.get("ConfigMap", policy.plugin_config_map, policy.namespace), policy
    except kube.ObjectNotFound as exc:
        raise ApplicationError(
            f"ConfigMap {policy.namespace}/{policy.plugin_config_map} not found"
        ) from exc


def _nodes_running(config: str, policy: ClusterPolicyState) -> list[str]:
    """The GPU nodes whose device plugin runs ``config``."""
    names = []
    for node in kube.list_all("Node", label_selector=f"{GPU_PRESENT_LABEL}=true"):
        label = (node["metadata"].get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL, "")
        if policy.plugin_config_for(label) == config:
            names.append(node["metadata"]["name"])
    return sorted(names)


def _sharing_check(nodes: list[str], config: str, sharing: TimeSlicing) -> list[SharingPreview]:
    previews = [sharing_preview(node=n, config=config, sharing=sharing) for n in nodes]
    problems = [p.problem for p in previews if p.problem]
    if problems:
        raise ApplicationError(" ".join(problems), field_errors={"replicas": problems})
    return previews


def _plugin_change(
    actor: User, node: str, old: str, new: str, preview: SharingPreview, action: str
) -> GpuChange:
    """Record a device plugin change on one node (already written) and follow it."""
    try:
        with transaction.atomic():
            change = GpuChange.objects.create(
                node=node,
                kind=GpuChange.Kind.TIME_SLICING,
                old_value=old,
                new_value=new,
                displace=GpuChange.Displace.WAIT,
                phase=GpuChange.Phase.APPLYING,
                labelled_at=timezone.now(),
                requested_by=actor,
                expected=preview.after,
                message=f"The device plugin restarts with {new}: "
                + ", ".join(f"{n} {r}" for r, n in preview.after.items()),
            )
            audit_record(
                actor=actor,
                action=action,
                target=f"node/{node}",
                changes={
                    "node": node,
                    DEVICE_PLUGIN_CONFIG_LABEL: [old, new],
                    "allocatable": [preview.before, preview.after],
                },
            )
            gpu_change_enqueue(change_id=change.pk)
    except IntegrityError as exc:
        raise Conflict(
            f"node {node} already has a change under way; wait for it to finish"
        ) from exc
    return change


def plugin_config_assign(*, actor: User, node: str, config: str) -> GpuChange:
    """Make ``node``'s device plugin run named config ``config`` (its label). Refused,
    naming them, when running pods would be stranded."""
    cm, policy = _plugin_map()
    data = cm.get("data") or {}
    if config not in data:
        raise ApplicationError(
            f"config: the device plugin's ConfigMap has no config {config} "
            f"(it has {', '.join(sorted(data))})",
            field_errors={"config": ["No such config."]},
        )
    sharing = parse_device_plugin_config(data[config])
    obj = node_get(node)
    if GpuChange.objects.filter(node=node, phase__in=GpuChange.ACTIVE).exists():
        raise Conflict(f"node {node} already has a change under way; wait for it to finish")
    old = policy.plugin_config_for(
        (obj["metadata"].get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL, "")
    )
    if old == config:
        raise Conflict(f"config: node {node} already runs {config}")
    (preview,) = _sharing_check([node], config, sharing)
    kube.label_node(node, {DEVICE_PLUGIN_CONFIG_LABEL: config})
    return _plugin_change(actor, node, old, config, preview, "gpu.device_plugin_config")


def plugin_config_save(
    *, actor: User, name: str, replicas: int, rename_by_default: bool
) -> list[GpuChange]:
    """Write named config ``name`` (``replicas`` of each GPU, 1: no sharing) into the
    device plugin's ConfigMap; the nodes running it restart with it, each change followed.
    Refused, naming them, when running pods would be stranded."""
    if not NAME_RE.match(name):
        raise ApplicationError(
            "name: lower-case letters, digits and '-', as a ConfigMap key and label value",
            field_errors={"name": ["Use lower-case letters, digits and '-'."]},
        )
    if replicas < 1 or replicas > MAX_REPLICAS:
        raise ApplicationError(
            f"replicas: 1 (no sharing) to {MAX_REPLICAS}",
            field_errors={"replicas": [f"From 1 to {MAX_REPLICAS}."]},
        )
    sharing = TimeSlicing({ANY_GPU: replicas} if replicas > 1 else {}, rename_by_default)
    cm, policy = _plugin_map()
    nodes = _nodes_running(name, policy)
    busy = GpuChange.objects.filter(node__in=nodes, phase__in=GpuChange.ACTIVE).first()
    if busy:
        raise Conflict(f"node {busy.node} runs {name} and has a change under way; wait for it")
    previews = _sharing_check(nodes, name, sharing)
    data = dict(cm.get("data") or {})
    old_text = data.get(name, "")
    data[name] = device_plugin_config_text(sharing)
    if data[name] == old_text:
        return []  # already so: nothing to write, nothing restarts
    try:
        kube.replace({**cm, "data": data})  # with its resourceVersion
    except kube.ObjectConflict as exc:
        raise Conflict(
            f"ConfigMap {cm['metadata']['name']} changed meanwhile; reload and try again"
        ) from exc
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc
    audit_record(
        actor=actor,
        action="gpu.device_plugin_config_saved",
        target=f"configmap/{cm['metadata']['name']}",
        changes={
            "config": name,
            "replicas": replicas,
            "rename_by_default": rename_by_default,
            "nodes": nodes,
        },
    )
    return [
        _plugin_change(actor, p.node, name, name, p, "gpu.device_plugin_config") for p in previews
    ]


def _follow_plugin(change: GpuChange, node: dict[str, Any]) -> bool:
    """Done once the node advertises what the config offers (the plugin restarted)."""
    labels = node["metadata"].get("labels") or {}
    policy = cluster_policy()
    expected = {str(r): int(n) for r, n in change.expected.items() if int(n)}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    offered = {r: int(q) for r, q in allocatable.items() if r in (ANY_GPU, SHARED_GPU) and int(q)}
    if policy.plugin_config_for(labels.get(DEVICE_PLUGIN_CONFIG_LABEL, "")) != change.new_value:
        return _finish(
            change,
            GpuChange.Phase.FAILED,
            f"{DEVICE_PLUGIN_CONFIG_LABEL} was changed by someone else meanwhile.",
        )
    if offered == expected:
        return _finish(
            change,
            GpuChange.Phase.SUCCEEDED,
            "The device plugin runs "
            + change.new_value
            + ": "
            + ", ".join(f"{n} {r}" for r, n in sorted(offered.items()))
            + " allocatable.",
        )
    assert change.labelled_at is not None
    if timezone.now() - change.labelled_at > PLUGIN_RESTART_TIMEOUT:
        return _finish(
            change,
            GpuChange.Phase.FAILED,
            f"The device plugin did not advertise {change.new_value}'s GPUs within "
            f"{int(PLUGIN_RESTART_TIMEOUT.total_seconds() // 60)} minutes; check its pod's log.",
        )
    return False
