"""A job failed by its GPU or its node: run again (training) away from the node, up to the
limit; a node failure is explained in words naming the pod, the node and when."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from jobs.models import Job, JobEvent, JobState
from jobs.services.hardware import (
    Recorded,
    job_hardware_failure_record,
    job_node_failure_record,
)
from tests.conftest import training_spec
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def failed_job(demo: dict[str, Any], **fields: Any) -> Job:
    spec = training_spec(checkpoint={"claim": "ckpt", "mount_path": "/checkpoints"})
    spec.setdefault("workers", 1)
    job = JobFactory(
        team=demo["teams"]["vision"],
        owner=demo["users"]["alice"],
        name=spec["name"],
        spec={**spec, "command": [], "args": [], "volumes": []},
        state=JobState.FAILED,
        object_name=f"{spec['name']}-1",
        started_at=timezone.now() - timezone.timedelta(hours=1),
        finished_at=timezone.now(),
        **fields,
    )
    return job


def test_a_training_job_runs_again_away_from_the_node_with_the_next_attempt(
    demo: dict[str, Any],
) -> None:
    job = failed_job(demo)
    recorded = job_hardware_failure_record(
        job_id=job.pk, reason="GPUFailure", message="GPU 5 failed.", nodes=["gpu-a"]
    )
    assert recorded == Recorded(changed=True, requeued=True)
    job.refresh_from_db()
    assert (job.state, job.reason, job.gpu_failure_retries) == (JobState.QUEUED, "GPUFailure", 1)
    assert job.evicted_at is not None and job.excluded_nodes == ["gpu-a"]
    assert len(job.earlier_runs) == 1 and job.started_at is None
    pod = job.manifests[-1]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-a"]} in terms[
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["RESTART_ATTEMPT"] == "1" and env["CHECKPOINT_DIR"] == "/checkpoints"
    assert {"name": "checkpoint", "mountPath": "/checkpoints"} in pod["containers"][0][
        "volumeMounts"
    ]
    assert "attempt 2 of 4) away from node gpu-a, resuming from its newest checkpoint" in (
        job.message
    )
    # Recorded once: a second look changes nothing.
    again = job_hardware_failure_record(
        job_id=job.pk, reason="GPUFailure", message="again", nodes=["gpu-a"]
    )
    assert again == Recorded(changed=False)


def test_past_the_limit_or_for_a_server_it_only_says_so(
    demo: dict[str, Any], settings: Any
) -> None:
    settings.GPU_FAILURE_RETRIES = 2
    exhausted = failed_job(demo, gpu_failure_retries=2, excluded_nodes=["gpu-a", "gpu-b"])
    assert job_hardware_failure_record(
        job_id=exhausted.pk, reason="GPUFailure", message="GPU 1 failed.", nodes=["gpu-c"]
    ) == Recorded(changed=True, requeued=False)
    exhausted.refresh_from_db()
    assert exhausted.state == JobState.FAILED and exhausted.reason == "GPUFailure"
    assert exhausted.message.endswith("It failed on hardware 3 times: not run again.")
    server = failed_job(demo, kind="inference")
    assert job_hardware_failure_record(
        job_id=server.pk, reason="GPUFailure", message="GPU 2 failed.", nodes=["gpu-a"]
    ).changed
    server.refresh_from_db()
    assert server.state == JobState.FAILED and server.message == "GPU 2 failed."
    assert JobEvent.objects.filter(reason="GPUFailure").count() == 2


def test_a_job_whose_node_stopped_responding_says_so_and_runs_again(
    demo: dict[str, Any], settings: Any
) -> None:
    settings.TIME_ZONE = "UTC"
    # Given a training job the taint manager evicted from a node that stopped responding
    job = failed_job(demo)
    evicted = [{"pod": "ft-1-abcde", "node": "gpu-b", "at": "2026-11-24T14:03:00+00:00"}]

    # When tracking reports it
    recorded = job_node_failure_record(job_id=job.pk, evicted=evicted)

    # Then the job says what failed, in words, and goes back to the queue away from the node
    assert recorded == Recorded(changed=True, requeued=True)
    job.refresh_from_db()
    assert job.reason == "NodeFailure" and job.state == JobState.QUEUED
    assert job.message.startswith(
        "pod ft-1-abcde failed: node gpu-b stopped responding (its kubelet stopped posting "
        "status) and the pod was evicted at 14:03. The node failed, not the program."
    )
    assert "(attempt 2 of 4) away from node gpu-b" in job.message
    assert job.excluded_nodes == ["gpu-b"] and job.gpu_failure_retries == 1
    assert [e.reason for e in JobEvent.objects.filter(job=job).order_by("pk")] == [
        "NodeFailure",
        "Retrying",
    ]
    # A GPU failure noticed later for the same run does not count it twice
    assert not job_hardware_failure_record(
        job_id=job.pk, reason="GPUFailure", message="GPU 1 failed."
    ).changed
