"""Controllers: quota refusals, Indexed Jobs, Deployments, logs, failures, PSA."""

from __future__ import annotations

import json

import pytest
from conftest import events_for, job_manifest, pod_manifest, wait_for
from kubernetes import client

from sandbox.api import objects
from sandbox.api.resources import BY_KEY
from sandbox.errors import ApiError
from sandbox.state import Cluster, Options
from sandbox.store import Store

QUOTA = {
    "metadata": {"name": "gpu-quota"},
    "spec": {"hard": {"requests.nvidia.com/gpu": "4", "pods": "10"}},
}


def test_resource_quota_refuses_direct_pod_with_403(core, namespace):
    # given a namespace limited to 4 GPUs
    core.create_namespaced_resource_quota(namespace, QUOTA)
    # when a pod asks for 8
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod(namespace, pod_manifest("greedy", {"nvidia.com/gpu": 8}))
    # then the API refuses it exactly like the ResourceQuota admission plugin
    assert info.value.status == 403
    body = json.loads(info.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "greedy" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=0, limited: "
        "requests.nvidia.com/gpu=4"
    )
    # and a fitting pod is admitted and counted in status.used
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "modest", {"nvidia.com/gpu": 3}, annotations={"sandbox.gpu-portal.dev/duration": "1h"}
        ),
    )
    quota = wait_for(
        lambda: (
            (q := core.read_namespaced_resource_quota("gpu-quota", namespace)).status.used.get(
                "requests.nvidia.com/gpu"
            )
            == "3"
            and q
        )
    )
    assert quota.status.hard["requests.nvidia.com/gpu"] == "4"
    assert quota.status.used["pods"] == "1"


def test_admitted_pods_are_charged_before_any_controller_recounts(tmp_path):
    # given a cluster whose controllers do not run (no quota recount between requests) and a
    # namespace limited to 4 GPUs
    cluster = Cluster(Store(tmp_path / "state.sqlite3"), Options())
    objects.create(cluster, BY_KEY["namespaces"], "", {"metadata": {"name": "quota"}})
    objects.create(cluster, BY_KEY["resourcequotas"], "quota", dict(QUOTA))
    hold = {"sandbox.gpu-portal.dev/duration": "1h"}
    # when two pods of 2 GPUs are admitted
    for name in ("first", "second"):
        pod = pod_manifest(name, {"nvidia.com/gpu": 2}, annotations=hold)
        objects.create(cluster, BY_KEY["pods"], "quota", pod)
    # then a third is refused: each admitted pod was charged into the quota's status.used
    # at admission, as the API server's quota plugin does
    with pytest.raises(ApiError) as info:
        third = pod_manifest("third", {"nvidia.com/gpu": 1}, annotations=hold)
        objects.create(cluster, BY_KEY["pods"], "quota", third)
    assert info.value.code == 403
    assert "used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4" in (
        info.value.message
    )


def test_resource_quota_makes_job_record_failed_create(core, batch, namespace):
    # given the same quota
    core.create_namespaced_resource_quota(namespace, QUOTA)
    # when a Job asks for 8 GPUs
    batch.create_namespaced_job(namespace, job_manifest("over", {"nvidia.com/gpu": 8}))
    # then the Job exists, has no pods, and carries a FailedCreate warning
    event = wait_for(lambda: next(iter(events_for(core, namespace, "over", "FailedCreate")), None))
    assert event.type == "Warning"
    assert event.message.startswith('Error creating: pods "over-')
    assert event.message.endswith(
        '" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, '
        "used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4"
    )
    job = batch.read_namespaced_job("over", namespace)
    assert not job.status.active and not job.status.conditions
    assert not core.list_namespaced_pod(namespace).items


def test_job_refused_by_quota_gets_its_pod_once_the_quota_is_raised(core, batch, namespace):
    # given a Job whose pod the quota refused (nothing about the Job or its pods changes
    # after that: only its creation backoff brings the controller back to it)
    core.create_namespaced_resource_quota(namespace, QUOTA)
    batch.create_namespaced_job(namespace, job_manifest("later", {"nvidia.com/gpu": 8}))
    wait_for(lambda: next(iter(events_for(core, namespace, "later", "FailedCreate")), None))
    # when an admin raises the quota
    core.patch_namespaced_resource_quota(
        "gpu-quota", namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    )
    # then the controller retries after its backoff and the pod is created
    pods = wait_for(lambda: core.list_namespaced_pod(namespace).items, timeout=30)
    assert [p.metadata.labels["job-name"] for p in pods] == ["later"]


def test_deployment_replica_failure_condition_on_quota(core, apps, namespace):
    core.create_namespaced_resource_quota(namespace, QUOTA)
    apps.create_namespaced_deployment(namespace, _deployment("too-big", 1, {"nvidia.com/gpu": 8}))
    cond = wait_for(
        lambda: next(
            (
                c
                for c in apps.read_namespaced_deployment("too-big", namespace).status.conditions
                or []
                if c.type == "ReplicaFailure"
            ),
            None,
        )
    )
    assert (cond.status, cond.reason) == ("True", "FailedCreate")
    assert "exceeded quota: gpu-quota" in cond.message


def _deployment(name, replicas, resources, annotations=None):
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": "vllm/vllm-openai:v0.5.0",
                            "ports": [{"containerPort": 8000}],
                            "resources": {"limits": resources},
                        }
                    ],
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            },
        },
    }


def test_deployment_keeps_replicas_and_replaces_deleted_pod(core, apps, namespace):
    # given a Deployment with 2 replicas
    apps.create_namespaced_deployment(namespace, _deployment("serve", 2, {"cpu": "250m"}))
    d = wait_for(
        lambda: (
            (d := apps.read_namespaced_deployment("serve", namespace)).status.ready_replicas == 2
            and d
        )
    )
    assert d.status.available_replicas == 2 and d.status.updated_replicas == 2
    conds = {c.type: c for c in d.status.conditions}
    assert conds["Available"].status == "True"
    assert conds["Progressing"].reason == "NewReplicaSetAvailable"
    pods = core.list_namespaced_pod(namespace, label_selector="app=serve").items
    assert len(pods) == 2
    rs_name = pods[0].metadata.owner_references[0].name
    assert pods[0].metadata.owner_references[0].kind == "ReplicaSet"
    assert rs_name.startswith("serve-")
    # when one pod is deleted
    victim = pods[0].metadata.name
    core.delete_namespaced_pod(victim, namespace)
    # then a replacement appears and the Deployment returns to 2 ready replicas
    wait_for(
        lambda: (
            (
                names := {
                    p.metadata.name
                    for p in core.list_namespaced_pod(namespace, label_selector="app=serve").items
                }
            )
            and victim not in names
            and len(names) == 2
        )
    )
    wait_for(lambda: apps.read_namespaced_deployment("serve", namespace).status.ready_replicas == 2)
    # and scaling via patch changes the pod count
    apps.patch_namespaced_deployment("serve", namespace, {"spec": {"replicas": 1}})
    wait_for(
        lambda: (
            len(
                [
                    p
                    for p in core.list_namespaced_pod(namespace, label_selector="app=serve").items
                    if not p.metadata.deletion_timestamp
                ]
            )
            == 1
        )
    )


def test_indexed_job_sets_index_env_and_hostname(core, batch, namespace):
    # given an Indexed Job with 3 completions
    job = job_manifest(
        "idx",
        {"cpu": "100m"},
        tolerate=False,
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        annotations={"sandbox.gpu-portal.dev/duration": "20s"},
    )
    job["spec"]["template"]["spec"]["subdomain"] = "idx-svc"
    batch.create_namespaced_job(namespace, job)
    # then pods carry the index label/annotation, env and hostname
    pods = wait_for(
        lambda: (
            len(p := core.list_namespaced_pod(namespace, label_selector="job-name=idx").items) == 3
            and p
        )
    )
    indexes = set()
    for pod in pods:
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert pod.metadata.labels["batch.kubernetes.io/job-completion-index"] == index
        assert pod.metadata.name.startswith(f"idx-{index}-")
        assert pod.spec.hostname == f"idx-{index}"
        assert pod.spec.subdomain == "idx-svc"
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["JOB_COMPLETION_INDEX"].value_from.field_ref.field_path == (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        )
        indexes.add(index)
    assert indexes == {"0", "1", "2"}
    done = wait_for(
        lambda: (j := batch.read_namespaced_job("idx", namespace)).status.succeeded == 3 and j
    )
    assert done.status.completed_indexes == "0-2"


def test_logs_with_tail_lines_and_timestamps(core, batch, namespace):
    # given a finished training Job
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            "logme", {"nvidia.com/gpu": 2}, annotations={"sandbox.gpu-portal.dev/duration": "60s"}
        ),
    )
    wait_for(lambda: batch.read_namespaced_job("logme", namespace).status.succeeded)
    pod = core.list_namespaced_pod(namespace, label_selector="job-name=logme").items[0]
    # when reading the whole log and the last 2 lines
    full = core.read_namespaced_pod_log(pod.metadata.name, namespace)
    tail = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=2)
    stamped = core.read_namespaced_pod_log(
        pod.metadata.name, namespace, tail_lines=1, timestamps=True, container="main"
    )
    # then the log tells a training story and the tail is its end
    lines = full.splitlines()
    assert "NVIDIA_VISIBLE_DEVICES=GPU-" in full and "world_size=1" in full
    losses = [float(x.split("loss=")[1].split()[0]) for x in lines if "loss=" in x]
    assert len(losses) >= 5 and losses[-1] < losses[0]
    assert "training finished" in lines[-1]
    assert tail.splitlines() == lines[-2:]
    assert stamped.split(" ", 1)[1].strip() == lines[-1]
    assert stamped[:4].isdigit() and "T" in stamped.split(" ")[0]
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_pod_log(pod.metadata.name, namespace, container="nope")
    assert info.value.status == 400


def test_failing_job_hits_backoff_limit(core, batch, namespace):
    # given a Job whose container exits 1, with backoffLimit 1
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            "crash",
            {"cpu": "100m"},
            tolerate=False,
            backoffLimit=1,
            annotations={
                "sandbox.gpu-portal.dev/duration": "5s",
                "sandbox.gpu-portal.dev/exit-code": "1",
            },
        ),
    )
    # then after 2 failed pods the Job fails with FailureTarget then Failed
    job = wait_for(
        lambda: (
            (j := batch.read_namespaced_job("crash", namespace)).status.conditions
            and any(c.type == "Failed" for c in j.status.conditions)
            and j
        ),
        timeout=30,
    )
    conds = {c.type: c for c in job.status.conditions}
    assert conds["Failed"].reason == "BackoffLimitExceeded"
    assert conds["Failed"].message == "Job has reached the specified backoff limit"
    assert conds["FailureTarget"].reason == "BackoffLimitExceeded"
    assert job.status.failed == 2
    pod = core.list_namespaced_pod(namespace, label_selector="job-name=crash").items[0]
    term = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, term.exit_code, term.reason) == ("Failed", 1, "Error")
    log = core.read_namespaced_pod_log(pod.metadata.name, namespace)
    assert "Traceback" in log and "Error" in log.splitlines()[-1]


def test_active_deadline_fails_job(batch, namespace):
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            "slow",
            {"cpu": "100m"},
            tolerate=False,
            activeDeadlineSeconds=30,
            annotations={"sandbox.gpu-portal.dev/duration": "1h"},
        ),
    )
    job = wait_for(
        lambda: (
            (j := batch.read_namespaced_job("slow", namespace)).status.conditions
            and any(c.type == "Failed" for c in j.status.conditions)
            and j
        )
    )
    failed = next(c for c in job.status.conditions if c.type == "Failed")
    assert (failed.reason, failed.message) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )


def test_restricted_pod_security_refuses_pod_and_warns_on_job(core, batch, namespace):
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod(
            namespace, pod_manifest("loose", {"cpu": "100m"}, tolerate=False)
        )
    assert info.value.status == 403
    message = json.loads(info.value.body)["message"]
    assert message.startswith(
        'pods "loose" is forbidden: violates PodSecurity '
        '"restricted:latest": allowPrivilegeEscalation != false'
    )
    assert "runAsNonRoot != true" in message and "seccompProfile" in message
    batch.create_namespaced_job(
        namespace, job_manifest("loosejob", {"cpu": "100m"}, tolerate=False)
    )
    event = wait_for(
        lambda: next(iter(events_for(core, namespace, "loosejob", "FailedCreate")), None)
    )
    assert "violates PodSecurity" in event.message
    safe = pod_manifest(
        "safe",
        {"cpu": "100m"},
        tolerate=False,
        securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    )
    safe["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert core.create_namespaced_pod(namespace, safe).metadata.name == "safe"
