"""Training launchers on a cluster that runs Kubeflow's training operator and Trainer (the
sandbox serves PyTorchJob and TrainJob; TrainJob's own tests: test_trainjob.py): the portal
lists what the cluster offers, and runs a PyTorchJob end to end — queued, running with the
operator's pods and torchrun's env, succeeded; a failing rank fails it with the exit code;
cancel removes every object; its progress comes from the master's log.

Real processes: PostgreSQL, Redis, a Celery worker with beat, the sandbox (30× real time).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from cluster import kube
from cluster.labels import JOB_ID_LABEL
from cluster.launchers import launchers_forget
from jobs.models import Job, JobState
from jobs.services.submit import job_cancel, job_submit
from tests.conftest import api_client_for, training_spec
from tests.integration.test_reclaim import LONG, seed, submit
from tests.worker_process import WorkerProcess, wait_for, wait_job

pytestmark = pytest.mark.django_db(transaction=True)


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def ddp(user: User, name: str, **env: str) -> Job:
    return job_submit(
        user=user,
        data=training_spec(
            name=name, launcher="pytorchjob", workers=2, gpu={"count": 1}, env=env, retries=0
        ),
    )


def test_the_cluster_offers_the_launchers_it_serves(users: dict[str, User]) -> None:
    # Given a cluster with the training operator and Trainer
    api = api_client_for(users["alice"])
    # When alice asks which launchers there are
    found = {row["name"]: row for row in api.get("/api/v1/cluster/launchers/").json()}
    # Then the Indexed Job, PyTorchJob and TrainJob are offered
    assert found["job"] == {
        "name": "job", "kind": "Job", "api": "batch/v1", "served": True, "enabled": True,
        "offered": True, "default": True,
    }  # fmt: skip
    assert found["pytorchjob"]["served"] and found["pytorchjob"]["offered"]
    assert found["trainjob"]["served"] and found["trainjob"]["offered"]


def test_a_pytorchjob_runs_with_the_operators_pods_and_succeeds(users: dict[str, User]) -> None:
    # Given alice's two-replica PyTorchJob
    job = ddp(users["alice"], "ddp", SANDBOX_DURATION="300s")
    assert [m["kind"] for m in job.manifests] == ["PyTorchJob"]
    # When it runs, Then its pods are the operator's, with torchrun's env, and it is running
    running = wait_job(job, JobState.RUNNING, timeout=60)
    pods = {
        p["metadata"]["name"]: p
        for p in kube.list_all("Pod", label_selector=f"{JOB_ID_LABEL}={job.pk}")
    }
    assert sorted(pods) == [f"{job.object_name}-master-0", f"{job.object_name}-worker-0"]
    worker = pods[f"{job.object_name}-worker-0"]["spec"]
    env = {e["name"]: e.get("value") for e in worker["containers"][0]["env"]}
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == (
        "1", "2", f"{job.object_name}-master-0",
    )  # fmt: skip
    assert worker["automountServiceAccountToken"] is False
    assert worker["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    # (running once the operator says so; both replicas' pods run soon after)
    assert running.message.endswith("replicas running (PyTorchJob).")
    wait_for(lambda: "2 of 2 replicas running" in fresh(job).message, timeout=30)
    # ...its progress is read from the master's log
    wait_for(lambda: fresh(job).progress is not None, timeout=30)
    # Then it succeeds, the master's exit code 0
    done = wait_for(lambda: (j := fresh(job)).state == JobState.SUCCEEDED and j, timeout=60)
    assert done.reason == "PyTorchJobSucceeded" and done.exit_code == 0


def test_a_failing_rank_fails_the_pytorchjob_with_its_exit_code(users: dict[str, User]) -> None:
    job = ddp(users["alice"], "crash", SANDBOX_DURATION="30s", SANDBOX_EXIT_CODE="3")
    failed = wait_job(job, JobState.FAILED, timeout=60)
    assert failed.reason == "PyTorchJobFailed"
    assert failed.exit_code == 3 and "exited with code 3" in failed.message, failed.message


def test_cancel_removes_the_pytorchjob_and_its_pods(users: dict[str, User]) -> None:
    job = ddp(users["alice"], "stop", SANDBOX_DURATION="3600s")
    wait_job(job, JobState.RUNNING, timeout=60)
    job_cancel(user=users["alice"], job_id=job.pk)

    def gone() -> Any:
        selector = f"{JOB_ID_LABEL}={job.pk}"
        return not list(kube.list_all("PyTorchJob", label_selector=selector)) and not list(
            kube.list_all("Pod", label_selector=selector)
        )

    wait_for(gone, timeout=30)
    assert fresh(job).state == JobState.CANCELLED


def test_a_borrowing_pytorchjob_is_reclaimed_and_runs_again(worker: WorkerProcess) -> None:
    # Given vision (6 GPUs) running 6 of its own and a low-priority PyTorchJob of 2 on
    # quota idle robotics (4) lends
    users = seed(vision=6, robotics=4)
    launchers_forget()
    alice, dave = users["alice"], users["dave"]
    own = submit(alice, "vision", 6, "own", env=LONG)
    wait_for(lambda: fresh(own).state == JobState.RUNNING, timeout=60)
    ddp_job = job_submit(
        user=alice,
        data=training_spec(
            name="ddp", launcher="pytorchjob", workers=2, gpu={"count": 1}, env=LONG,
            priority="low",
        ),
    )  # fmt: skip
    wait_for(lambda: (j := fresh(ddp_job)).state == JobState.RUNNING and j.borrowing, timeout=60)
    # When robotics takes its 4 GPUs back
    mine = submit(dave, "robotics", 4, "mine", env={"SANDBOX_DURATION": "90s"})
    # Then the PyTorchJob is evicted (its objects deleted), in the reclaim's words, once
    evicted = wait_for(lambda: (j := fresh(ddp_job)).evictions == 1 and j, timeout=60)
    assert "team robotics reclaimed 2 nvidia.com/gpu it had lent to vision" in (
        evicted.events.get(reason="Preempted").message
    )
    wait_for(lambda: fresh(mine).state in (JobState.RUNNING, JobState.SUCCEEDED), timeout=60)
    # And once robotics is done, it is admitted again and runs as a new PyTorchJob
    wait_for(lambda: fresh(mine).state == JobState.SUCCEEDED, timeout=60)
    back = wait_for(lambda: (j := fresh(ddp_job)).state == JobState.RUNNING and j, timeout=60)
    assert back.evictions == 1 and fresh(own).evictions == 0
    assert (
        len(list(kube.list_all("PyTorchJob", label_selector=f"{JOB_ID_LABEL}={ddp_job.pk}"))) == 1
    )
