"""What the cluster says about a job → the portal's state (pure mapping, real object shapes)."""

from __future__ import annotations

from typing import Any

from jobs.tracking.observe import observe_inference, observe_pytorchjob, observe_training


def k8s_job(conditions: list[dict[str, Any]] = (), **status: Any) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "metadata": {"name": "train-1", "namespace": "team-vision"},
        "spec": {"parallelism": status.pop("parallelism", 1), "completions": 1},
        "status": {"startTime": "2026-01-01T10:00:00Z", "conditions": list(conditions), **status},
    }


def pod(name: str, phase: str, node: str | None = "gpu-a100-0", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-vision"},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, **status},
    }


def test_complete_condition_means_succeeded_with_times() -> None:
    job = k8s_job(
        [{"type": "Complete", "status": "True", "reason": "CompletionsReached",
          "message": "Reached expected number of succeeded pods"}],
        completionTime="2026-01-01T11:00:00Z",
    )  # fmt: skip

    seen = observe_training(job, [pod("train-1-a", "Succeeded")], [])

    assert (seen.state, seen.reason, seen.exit_code) == ("succeeded", "CompletionsReached", 0)
    assert seen.finished_at is not None and seen.finished_at.hour == 11
    assert seen.placement["nodes"] == ["gpu-a100-0"]


def test_failed_condition_carries_the_containers_exit_code() -> None:
    job = k8s_job([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit"}])  # fmt: skip
    crashed = pod(
        "train-1-a", "Failed",
        containerStatuses=[{"name": "main", "state": {"terminated": {
            "exitCode": 3, "reason": "Error", "finishedAt": "2026-01-01T10:05:00Z"}}}],
    )  # fmt: skip

    seen = observe_training(job, [crashed], [])

    assert (seen.state, seen.reason, seen.exit_code) == ("failed", "BackoffLimitExceeded", 3)
    assert seen.message.endswith("Container main exited with code 3 (Error).")


def test_unschedulable_pod_gives_the_schedulers_message() -> None:
    message = "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."
    waiting = pod(
        "train-1-a", "Pending", node=None,
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": message}],
    )  # fmt: skip

    seen = observe_training(k8s_job(active=1), [waiting], [])

    assert (seen.state, seen.reason, seen.message) == ("pending", "Unschedulable", message)
    assert seen.unschedulable_pod is waiting


def test_running_only_when_every_worker_runs() -> None:
    job = k8s_job(active=2, parallelism=2)
    half = [pod("w-0", "Running"), pod("w-1", "Pending", node=None)]
    full = [pod("w-0", "Running"), pod("w-1", "Running", node="gpu-a100-1")]

    assert observe_training(job, half, []).state == "pending"
    seen = observe_training(job, full, [])
    assert (seen.state, seen.message) == ("running", "2 of 2 workers running.")
    assert seen.placement["nodes"] == ["gpu-a100-0", "gpu-a100-1"]


def test_finished_pods_before_the_complete_condition_do_not_flap_to_pending() -> None:
    seen = observe_training(k8s_job(succeeded=1), [pod("train-1-a", "Succeeded")], [])

    assert (seen.state, seen.reason) == ("running", "Completing")


def test_a_pod_failed_past_the_backoff_limit_before_the_failure_condition_does_not_flap() -> None:
    # Given a Job of backoffLimit 0 whose only pod failed (its GPU fell off the bus), seen
    # before the Job controller wrote FailureTarget
    job = k8s_job(failed=1)
    job["spec"]["backoffLimit"] = 0

    seen = observe_training(job, [pod("train-1-a", "Failed")], [])

    # Then it is failing, not back to pending waiting for pods
    assert (seen.state, seen.reason) == ("running", "Failing")
    # (with retries left, the controller makes a new pod: that is waiting for pods)
    job["spec"]["backoffLimit"] = 2
    assert observe_training(job, [pod("train-1-a", "Failed")], []).state == "pending"


def test_quota_refusal_events_explain_a_job_without_pods() -> None:
    message = (
        'Error creating: pods "train-1-x" is forbidden: exceeded quota: gpu-portal-quota, '
        "requested: requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=16, "
        "limited: requests.nvidia.com/gpu=16"
    )
    event = {"reason": "FailedCreate", "type": "Warning", "message": message,
             "lastTimestamp": "2026-01-01T10:00:01Z"}  # fmt: skip

    seen = observe_training(k8s_job(active=0), [], [event])

    assert (seen.state, seen.reason) == ("pending", "QuotaExceeded")
    assert "exceeded quota" in seen.message


def deployment(available: int, replicas: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "serve-4", "namespace": "team-nlp"},
        "spec": {"replicas": replicas},
        "status": {"availableReplicas": available, **extra},
    }


def test_inference_is_running_when_every_replica_is_available() -> None:
    pods = [pod("serve-4-a", "Running"), pod("serve-4-b", "Running", node="gpu-a100-1")]

    seen = observe_inference(deployment(2), pods, [])

    assert (seen.state, seen.reason) == ("running", "Available")


def test_inference_with_some_replicas_serving_is_degraded_not_pending() -> None:
    pods = [pod("serve-4-a", "Running"), pod("serve-4-b", "Pending")]

    seen = observe_inference(deployment(1), pods, [])

    assert (seen.state, seen.reason) == ("running", "Degraded")


def test_replica_failure_condition_reports_quota() -> None:
    message = 'pods "serve-4-x" is forbidden: exceeded quota: gpu-portal-quota'
    failure = {
        "type": "ReplicaFailure",
        "status": "True",
        "reason": "FailedCreate",
        "message": message,
    }

    seen = observe_inference(deployment(0, conditions=[failure]), [], [])

    assert (seen.state, seen.reason) == ("pending", "QuotaExceeded")


def test_a_refused_worker_pod_explains_a_pytorchjob_whose_master_runs() -> None:
    # The training operator made the master; the API server refused the worker (its event)
    message = (
        'Error creating: pods "ddp-1-worker-0" is forbidden: violates PodSecurity '
        '"restricted:latest": allowPrivilegeEscalation != false (container "init-pytorch" '
        "must set securityContext.allowPrivilegeEscalation=false)"
    )
    event = {"reason": "FailedCreatePod", "type": "Warning", "message": message,
             "lastTimestamp": "2026-01-01T10:00:05Z"}  # fmt: skip
    master = pod("ddp-1-master-0", "Running")
    master["metadata"]["creationTimestamp"] = "2026-01-01T10:00:01Z"
    pytorchjob = {
        "metadata": {"name": "ddp-1", "namespace": "team-vision"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}},
        "status": {"conditions": []},
    }

    seen = observe_pytorchjob(pytorchjob, [master], [event])

    assert (seen.state, seen.reason) == ("pending", "FailedCreate")
    assert "init-pytorch" in seen.message
    # ...but not once a worker was made after it (the refusal is history)
    worker = pod("ddp-1-worker-0", "Pending", node=None)
    worker["metadata"]["creationTimestamp"] = "2026-01-01T10:00:09Z"
    assert observe_pytorchjob(pytorchjob, [master, worker], [event]).reason != "FailedCreate"
