"""Jobs go through a real Celery worker to a real sandbox cluster and are tracked to the end.

The worker runs as a subprocess with embedded beat (reconcile every second); the
sandbox runs 30× faster than real time. The sandbox reads ``SANDBOX_DURATION`` and
``SANDBOX_EXIT_CODE`` from the container env, as a real program decides its own runtime.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from kubernetes import client, config

from jobs.models import Job, JobState
from jobs.services.submit import job_cancel, job_submit
from teams.models import Team
from teams.services import team_save
from tests.conftest import training_spec
from tests.sandbox_process import SandboxProcess
from tests.worker_process import WorkerProcess, wait_for, wait_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def users(worker: WorkerProcess) -> dict[str, User]:
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    # vision's 16 GPUs as a hard limit (tests/integration/test_reclaim.py covers cohorts)
    vision = Team.objects.get(slug="vision")
    vision.cohort = None
    team_save(actor=None, team=vision)
    return {u.username: u for u in User.objects.all()}


def k8s(sandbox: SandboxProcess) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(sandbox.kubeconfig))


def state_of(job_id: int) -> Job:
    return Job.objects.get(pk=job_id)


def wait_state(job_id: int, *states: str, timeout: float = 40.0) -> Job:
    found: Job = wait_job(job_id, *states, timeout=timeout)
    return found


def test_submit_runs_and_succeeds(users: dict[str, User], worker: WorkerProcess) -> None:
    job = job_submit(
        user=users["alice"],
        data=training_spec(name="ok", env={"SANDBOX_DURATION": "60s"}, gpu={"count": 2}),
    )

    running = wait_state(job.pk, JobState.RUNNING, JobState.SUCCEEDED)
    done = wait_state(job.pk, JobState.SUCCEEDED)

    assert running.placement["nodes"], running.placement
    assert done.exit_code == 0
    assert done.started_at is not None and done.finished_at is not None
    reasons = list(done.events.values_list("reason", flat=True))
    assert reasons[:3] == ["Submitted", "Admitted", "Applied"]
    assert "Scheduled" in reasons  # Kubernetes events land in the timeline
    assert reasons.count("Scheduled") == 1  # deduplicated across reconcile runs


def test_failing_container_fails_the_job_with_its_exit_code(
    users: dict[str, User], worker: WorkerProcess
) -> None:
    job = job_submit(
        user=users["alice"],
        data=training_spec(
            name="crash", env={"SANDBOX_DURATION": "30s", "SANDBOX_EXIT_CODE": "3"}, retries=0
        ),
    )

    failed = wait_state(job.pk, JobState.FAILED)

    assert failed.exit_code == 3
    assert failed.reason == "BackoffLimitExceeded"
    assert "exited with code 3" in failed.message


def test_unschedulable_job_is_pending_with_scheduler_message_and_advice(
    users: dict[str, User], worker: WorkerProcess
) -> None:
    # The catalog offers H100s, but this (small) cluster has none.
    job = job_submit(
        user=users["alice"],
        data=training_spec(name="h100", gpu={"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}),
    )

    pending = wait_for(
        lambda: (j := state_of(job.pk)).reason == "Unschedulable" and j.advice and j, timeout=40
    )

    assert pending.state == JobState.PENDING
    assert pending.message.startswith("0/5 nodes are available:")
    assert "didn't match Pod's node affinity/selector" in pending.message
    assert "NVIDIA-H100-80GB-HBM3" in pending.advice


def test_cancel_deletes_the_objects(
    users: dict[str, User], worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    job = job_submit(
        user=users["alice"], data=training_spec(name="long", env={"SANDBOX_DURATION": "1h"})
    )
    wait_state(job.pk, JobState.RUNNING)
    batch = client.BatchV1Api(k8s(cluster))
    assert batch.read_namespaced_job(job.object_name, "team-vision")

    job_cancel(user=users["alice"], job_id=job.pk)

    def gone() -> bool:
        try:
            batch.read_namespaced_job(job.object_name, "team-vision")
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=20)
    assert state_of(job.pk).state == JobState.CANCELLED


def test_cancelling_a_queued_job_never_reaches_the_cluster(
    users: dict[str, User], worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    blockers = [
        job_submit(
            user=users["alice"],
            data=training_spec(name=f"big{i}", gpu={"count": 8}, env={"SANDBOX_DURATION": "1h"}),
        )
        for i in range(2)
    ]
    waiting = job_submit(user=users["alice"], data=training_spec(name="waits", gpu={"count": 8}))
    for blocker in blockers:
        wait_state(blocker.pk, JobState.PENDING, JobState.RUNNING)
    wait_for(lambda: state_of(waiting.pk).reason == "QuotaExceeded")

    job_cancel(user=users["alice"], job_id=waiting.pk)

    jobs = client.BatchV1Api(k8s(cluster)).list_namespaced_job("team-vision")
    assert waiting.object_name not in {j.metadata.name for j in jobs.items}
    assert state_of(waiting.pk).applied_at is None


def test_quota_queues_jobs_and_admits_them_when_quota_frees(
    users: dict[str, User], worker: WorkerProcess
) -> None:
    # vision may hold 16 GPUs; three 8-GPU jobs: the third waits for the first to finish.
    first = job_submit(
        user=users["alice"],
        data=training_spec(name="q1", gpu={"count": 8}, env={"SANDBOX_DURATION": "90s"}),
    )
    second = job_submit(
        user=users["alice"],
        data=training_spec(name="q2", gpu={"count": 8}, env={"SANDBOX_DURATION": "1h"}),
    )
    third = job_submit(
        user=users["bob"],
        data=training_spec(name="q3", gpu={"count": 8}, env={"SANDBOX_DURATION": "30s"}),
    )

    waiting = wait_for(lambda: (j := state_of(third.pk)).reason == "QuotaExceeded" and j)
    assert waiting.state == JobState.QUEUED
    assert "team vision uses 16 of 16 nvidia.com/gpu" in waiting.message
    assert state_of(second.pk).admitted_at is not None

    wait_state(first.pk, JobState.SUCCEEDED, timeout=60)
    admitted = wait_state(third.pk, JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED)
    assert admitted.admitted_at is not None


def test_objects_deleted_behind_the_portals_back_mark_the_job_lost(
    users: dict[str, User], worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    job = job_submit(
        user=users["alice"], data=training_spec(name="gone", env={"SANDBOX_DURATION": "1h"})
    )
    wait_state(job.pk, JobState.RUNNING)

    client.BatchV1Api(k8s(cluster)).delete_namespaced_job(
        job.object_name, "team-vision", propagation_policy="Background"
    )

    lost = wait_state(job.pk, JobState.FAILED)
    assert lost.reason == "Lost"
