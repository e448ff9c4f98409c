"""GPU scheduling on the simulated nodes by the real kube-scheduler: fit, taints, MIG,
time-slicing, preemption, in its own words."""

from __future__ import annotations

import re

from conftest import (
    events_for,
    job_manifest,
    pod_manifest,
    wait_for,
)
from kubernetes import client

A100 = "NVIDIA-A100-SXM4-80GB"


def _condition(obj, ctype):
    return next((c for c in obj.status.conditions or [] if c.type == ctype), None)


def test_eight_gpu_job_is_scheduled_runs_and_completes(core, batch, namespace):
    # given a Job asking for all 8 A100s of one node, tolerating the GPU taint
    job = job_manifest(
        "train8",
        {"nvidia.com/gpu": 8},
        product=A100,
        annotations={"sandbox.gpu-portal.dev/duration": "30s"},
    )
    # when it is created
    batch.create_namespaced_job(namespace, job)
    # then its pod lands on an A100 node, runs, and the Job completes in two steps
    pod = wait_for(
        lambda: next(
            iter(
                core.list_namespaced_pod(
                    namespace, label_selector="job-name=train8,batch.kubernetes.io/job-name=train8"
                ).items
            ),
            None,
        )
    )
    running = wait_for(
        lambda: (
            (p := core.read_namespaced_pod(pod.metadata.name, namespace)).status.phase
            in ("Running", "Succeeded")
            and p
        )
    )
    assert running.spec.node_name.startswith("gpu-a100-")
    assert running.spec.node_name != "gpu-a100-mig-0"
    assert running.status.host_ip and running.status.start_time
    done = wait_for(
        lambda: (
            (j := batch.read_namespaced_job("train8", namespace)).status.conditions
            and _condition(j, "Complete")
            and j
        )
    )
    types = [c.type for c in done.status.conditions]
    assert types.index("SuccessCriteriaMet") < types.index("Complete")
    assert _condition(done, "Complete").reason == "CompletionsReached"
    assert done.status.succeeded == 1 and not done.status.active
    assert done.status.completion_time and done.status.start_time
    finished = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert finished.status.phase == "Succeeded"
    term = finished.status.container_statuses[0].state.terminated
    assert term.exit_code == 0 and term.reason == "Completed"
    scheduled = events_for(core, namespace, pod.metadata.name, "Scheduled")
    assert scheduled[0].message == (
        f"Successfully assigned {namespace}/{pod.metadata.name} to {running.spec.node_name}"
    )
    reasons = {e.reason for e in events_for(core, namespace, pod.metadata.name)}
    assert {"Pulling", "Pulled", "Created", "Started"} <= reasons
    job_events = {(e.reason, e.message) for e in events_for(core, namespace, "train8")}
    assert ("SuccessfulCreate", f"Created pod: {pod.metadata.name}") in job_events
    assert ("Completed", "Job completed") in job_events


def test_nine_gpus_fail_scheduling_with_kube_scheduler_message(core, namespace):
    # given a pod asking for more GPUs than any node has
    core.create_namespaced_pod(namespace, pod_manifest("nine", {"nvidia.com/gpu": 9}))
    # then it stays Pending with the exact kube-scheduler text
    event = wait_for(
        lambda: next(iter(events_for(core, namespace, "nine", "FailedScheduling")), None)
    )
    # small profile: 2 A100 (8 GPUs), 1 T4 shared node, 1 MIG node, 1 cpu node = 5 nodes
    # (kube-scheduler 1.35: its DRA plugin's post-filter adds "no new claims to deallocate")
    assert re.fullmatch(
        r"0/5 nodes are available: (\d+ [^,]+)(, \d+ [^,]+)*\. no new claims to deallocate, "
        r"preemption: 0/5 nodes are available: .*\.",
        event.message,
    ), event.message
    assert "5 Insufficient nvidia.com/gpu" in event.message
    assert event.type == "Warning"
    assert event.reporting_component == "default-scheduler"
    assert event.action == "Scheduling"
    pod = core.read_namespaced_pod("nine", namespace)
    assert pod.status.phase == "Pending" and not pod.spec.node_name
    cond = _condition(pod, "PodScheduled")
    assert (cond.status, cond.reason, cond.message) == ("False", "Unschedulable", event.message)


def test_gpu_pod_without_toleration_is_refused_by_taint(core, namespace):
    # given a GPU pod without the nvidia.com/gpu toleration
    core.create_namespaced_pod(
        namespace, pod_manifest("notol", {"nvidia.com/gpu": 1}, tolerate=False)
    )
    # then every GPU node refuses it by taint, and the CPU node lacks GPUs
    event = wait_for(
        lambda: next(iter(events_for(core, namespace, "notol", "FailedScheduling")), None)
    )
    assert event.message.startswith(
        "0/5 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "4 node(s) had untolerated taint(s). no new claims to deallocate, preemption: "
    ), event.message


def test_mig_and_time_sliced_resources_are_advertised_and_fit(core, namespace):
    # given the MIG node (2 GPUs × 7 1g.10gb, 1 × 3 2g.20gb, 1 × 2 3g.40gb) and the T4 node
    mig = core.read_node("gpu-a100-mig-0")
    t4 = core.read_node("gpu-t4-shared-0")
    # then allocatable counts match what the device plugin would advertise
    assert mig.status.allocatable["nvidia.com/mig-1g.10gb"] == "14"
    assert mig.status.allocatable["nvidia.com/mig-2g.20gb"] == "3"
    assert mig.status.allocatable["nvidia.com/mig-3g.40gb"] == "2"
    assert "nvidia.com/gpu" not in mig.status.allocatable
    assert mig.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert mig.metadata.labels["nvidia.com/mig-1g.10gb.count"] == "14"
    assert t4.status.allocatable["nvidia.com/gpu.shared"] == "8"
    # renameByDefault: the product keeps its name (GFD adds -SHARED only when time-sliced
    # GPUs keep the plain nvidia.com/gpu name)
    assert t4.metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert t4.metadata.labels["nvidia.com/gpu.replicas"] == "4"
    assert t4.metadata.labels["nvidia.com/gpu.replicas"] == "4"
    assert {(t.key, t.value, t.effect) for t in t4.spec.taints} == {
        ("nvidia.com/gpu", "present", "NoSchedule")
    }
    # when pods ask for MIG slices and shared T4 replicas
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "mig2",
            {"nvidia.com/mig-2g.20gb": 2},
            annotations={"sandbox.gpu-portal.dev/duration": "1h"},
        ),
    )
    core.create_namespaced_pod(namespace, pod_manifest("mig2b", {"nvidia.com/mig-2g.20gb": 2}))
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "shared",
            {"nvidia.com/gpu.shared": 8},
            annotations={"sandbox.gpu-portal.dev/duration": "1h"},
        ),
    )
    # then the fitting ones land on the right nodes and the over-ask fails on that resource
    placed = wait_for(
        lambda: (p := core.read_namespaced_pod("mig2", namespace)).spec.node_name and p
    )
    assert placed.spec.node_name == "gpu-a100-mig-0"
    shared = wait_for(
        lambda: (p := core.read_namespaced_pod("shared", namespace)).spec.node_name and p
    )
    assert shared.spec.node_name == "gpu-t4-shared-0"
    event = wait_for(
        lambda: next(iter(events_for(core, namespace, "mig2b", "FailedScheduling")), None)
    )
    # every node either lacks the resource or has it all taken (the pod tolerates the taint)
    assert event.message.startswith(
        "0/5 nodes are available: 5 Insufficient nvidia.com/mig-2g.20gb. "
        "no new claims to deallocate, preemption: "
    ), event.message
    core.create_namespaced_pod(namespace, pod_manifest("shared2", {"nvidia.com/gpu.shared": 1}))
    event = wait_for(
        lambda: next(iter(events_for(core, namespace, "shared2", "FailedScheduling")), None)
    )
    assert event.message.startswith(
        "0/5 nodes are available: 5 Insufficient nvidia.com/gpu.shared. "
        "no new claims to deallocate, preemption: "
    ), event.message


def _priority_class(sched, name, value, policy="PreemptLowerPriority"):
    try:
        sched.create_priority_class(
            {"metadata": {"name": name}, "value": value, "preemptionPolicy": policy}
        )
    except client.ApiException as exc:
        assert exc.status == 409  # (the test process's cluster has it: same name, same value)


def test_high_priority_pod_preempts_low_priority_pod(core, sched, namespace):
    # given a low-priority pod holding all 8 GPUs of gpu-a100-1
    _priority_class(sched, "test-low", 100)
    _priority_class(sched, "test-high", 1000)
    pin = {"kubernetes.io/hostname": "gpu-a100-1"}
    low = pod_manifest(
        "low",
        {"nvidia.com/gpu": 8},
        priorityClassName="test-low",
        nodeSelector=pin,
        annotations={"sandbox.gpu-portal.dev/duration": "2h"},
    )
    core.create_namespaced_pod(namespace, low)
    low_pod = wait_for(
        lambda: (p := core.read_namespaced_pod("low", namespace)).status.phase == "Running" and p
    )
    assert low_pod.spec.priority == 100
    # when a high-priority pod needs that node
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "high", {"nvidia.com/gpu": 8}, priorityClassName="test-high", nodeSelector=pin
        ),
    )
    # then the victim is marked, evented and deleted, and the preemptor runs there
    preempted = wait_for(lambda: next(iter(events_for(core, namespace, "low", "Preempted")), None))
    high = core.read_namespaced_pod("high", namespace)
    assert preempted.message == f"Preempted by pod {high.metadata.uid} on node gpu-a100-1"
    assert preempted.type == "Normal"
    wait_for(
        lambda: (
            not core.list_namespaced_pod(namespace, field_selector="metadata.name=low").items
            or None
        )
    )
    bound = wait_for(
        lambda: (p := core.read_namespaced_pod("high", namespace)).spec.node_name and p
    )
    assert bound.spec.node_name == "gpu-a100-1"
    assert bound.spec.priority == 1000


def test_victim_gets_disruption_target_condition(core, sched, namespace):
    # given a running low-priority pod pinned to gpu-a100-0
    _priority_class(sched, "test-low", 100)
    _priority_class(sched, "test-high", 1000)
    pin = {"kubernetes.io/hostname": "gpu-a100-0"}
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "victim",
            {"nvidia.com/gpu": 8},
            priorityClassName="test-low",
            nodeSelector=pin,
            terminationGracePeriodSeconds=600,
            # it checkpoints for 5 simulated minutes once told to stop: the test's window
            annotations={
                "sandbox.gpu-portal.dev/duration": "2h",
                "sandbox.gpu-portal.dev/stop": "5m",
            },
        ),
    )
    wait_for(lambda: core.read_namespaced_pod("victim", namespace).status.phase == "Running")
    # when a higher-priority pod preempts it
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "preemptor", {"nvidia.com/gpu": 8}, priorityClassName="test-high", nodeSelector=pin
        ),
    )
    # then while terminating it carries DisruptionTarget and the preemptor is nominated
    victim = wait_for(
        lambda: (
            (p := core.read_namespaced_pod("victim", namespace)).metadata.deletion_timestamp and p
        ),
        timeout=10,
    )
    cond = _condition(victim, "DisruptionTarget")
    assert (cond.status, cond.reason, cond.message) == (
        "True",
        "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority pod",
    )
    assert core.read_namespaced_pod("preemptor", namespace).status.nominated_node_name == (
        "gpu-a100-0"
    )
    core.delete_namespaced_pod("preemptor", namespace, grace_period_seconds=0)


def test_preemption_policy_never_does_not_preempt(core, sched, namespace):
    # given a low-priority pod holding a node and a high class that never preempts
    _priority_class(sched, "test-low", 100)
    _priority_class(sched, "test-high-never", 2000, "Never")
    pin = {"kubernetes.io/hostname": "gpu-a100-1"}
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "holder",
            {"nvidia.com/gpu": 8},
            priorityClassName="test-low",
            nodeSelector=pin,
            annotations={"sandbox.gpu-portal.dev/duration": "2h"},
        ),
    )
    wait_for(lambda: core.read_namespaced_pod("holder", namespace).status.phase == "Running")
    # when the never-preempting pod wants the same node
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "polite", {"nvidia.com/gpu": 8}, priorityClassName="test-high-never", nodeSelector=pin
        ),
    )
    polite = wait_for(
        lambda: next(iter(events_for(core, namespace, "polite", "FailedScheduling")), None)
    )
    # then it waits, and the holder keeps running without a Preempted event
    assert core.read_namespaced_pod("polite", namespace).spec.preemption_policy == "Never"
    assert "Insufficient nvidia.com/gpu" in polite.message
    holder = core.read_namespaced_pod("holder", namespace)
    assert holder.status.phase == "Running" and not holder.metadata.deletion_timestamp
    assert not events_for(core, namespace, "holder", "Preempted")
    assert not core.read_namespaced_pod("polite", namespace).spec.node_name


def test_unknown_priority_class_is_forbidden(core, namespace):
    body = pod_manifest("nopc", {"nvidia.com/gpu": 1}, priorityClassName="gpu-x")
    try:
        core.create_namespaced_pod(namespace, body)
    except client.ApiException as exc:
        assert exc.status == 403
        import json

        status = json.loads(exc.body)
        assert status["reason"] == "Forbidden"
        assert status["message"] == (
            'pods "nopc" is forbidden: no PriorityClass with name gpu-x was found'
        )
    else:
        raise AssertionError("expected 403")
