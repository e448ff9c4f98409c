"""Kubeflow Trainer's TrainJob as a launcher, on the local cluster's real Trainer v2.3 and
JobSet 0.12: queued, running on Trainer's pods with torchrun's env and the portal's
restricted pod settings, its progress and time to finish from what the training code reports
through Trainer (``trainerStatus``), succeeded; a failing node fails it with the exit code;
cancel removes the TrainJob, its JobSet and pods; the portal writes its runtime, and without
it TrainJob is not offered. (A borrowing TrainJob reclaimed and run again, on both queueing
engines: test_sharing_engines.py.)

Real processes: PostgreSQL, Redis, a Celery worker with beat, the local cluster (its
simulated nodes at 30× real time; rank 0 writes ``trainerStatus`` as Trainer's status server
would, ``sandbox/nodes/trainer_status.py``).
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
from tests.integration.test_reclaim import fresh
from tests.worker_process import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def trainjob(user: User, name: str, **env: str) -> Job:
    return job_submit(
        user=user,
        data=training_spec(
            name=name, launcher="trainjob", workers=2, gpu={"count": 1}, env=env, retries=0
        ),
    )


def selector(job: Job) -> str:
    return f"{JOB_ID_LABEL}={job.pk}"


def test_a_trainjob_runs_on_trainers_pods_reports_progress_and_succeeds(
    users: dict[str, User],
) -> None:
    # Given alice's two-node TrainJob
    job = trainjob(users["alice"], "llm", SANDBOX_DURATION="600s")
    assert [m["kind"] for m in job.manifests] == ["TrainJob"]
    # When it runs, Then its pods are Trainer's (a JobSet of its name), with torchrun's env
    # set by Trainer and the portal's restricted pod settings, and it is running
    running = wait_for(lambda: (j := fresh(job)).state == JobState.RUNNING and j, timeout=60)
    assert "2 of 2 nodes running (TrainJob)" in running.message
    pods = list(kube.list_all("Pod", label_selector=selector(job)))
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] for p in pods} == {
        job.object_name
    }
    pod = pods[0]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["PET_NNODES"] == "2"
    assert env["PET_MASTER_ADDR"] == f"{job.object_name}-node-0-0.{job.object_name}"
    assert pod["serviceAccountName"] == "gpu-portal-workload"
    sa = kube.get("ServiceAccount", "gpu-portal-workload", job.namespace)
    assert sa["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    # ...its progress and time to finish are what the training code reports through Trainer
    reported = wait_for(
        lambda: (j := fresh(job)).progress and j.progress["source"] == "trainerStatus" and j,
        timeout=60,
    )
    assert 0 < reported.progress["percent"] < 100
    assert reported.progress["step"] < reported.progress["total"]
    assert reported.eta_seconds is not None and reported.eta_seconds > 0
    assert "through Kubeflow Trainer" in reported.eta_basis
    # ...and its logs are its nodes' (rank 0's, its training steps)
    logs = api_client_for(users["alice"]).get(f"/api/v1/jobs/{job.pk}/logs/?tail=50").json()
    by_pod = {p["pod"]: p["log"] for p in logs["pods"]}
    rank_zero = next(p["metadata"]["name"] for p in pods if p["metadata"]["annotations"][
        "batch.kubernetes.io/job-completion-index"] == "0")  # fmt: skip
    assert set(by_pod) == {p["metadata"]["name"] for p in pods}
    assert "loss=" in by_pod[rank_zero]
    # Then it succeeds as its JobSet does
    done = wait_for(lambda: (j := fresh(job)).state == JobState.SUCCEEDED and j, timeout=90)
    assert done.reason == "AllJobsCompleted" and done.exit_code == 0


def test_a_failing_node_fails_the_trainjob_with_its_exit_code(users: dict[str, User]) -> None:
    job = trainjob(users["alice"], "crash", SANDBOX_DURATION="30s", SANDBOX_EXIT_CODE="3")
    failed = wait_for(lambda: (j := fresh(job)).state == JobState.FAILED and j, timeout=60)
    assert failed.reason == "FailedJobs"
    assert failed.exit_code == 3 and "exited with code 3" in failed.message


def test_cancel_removes_the_trainjob_its_jobset_and_pods(users: dict[str, User]) -> None:
    job = trainjob(users["alice"], "stop", SANDBOX_DURATION="3600s")
    wait_for(lambda: fresh(job).state == JobState.RUNNING, timeout=60)
    job_cancel(user=users["alice"], job_id=job.pk)

    def gone() -> Any:
        left = list(kube.list_all("TrainJob", label_selector=selector(job)))
        left += kube.list_all("Pod", label_selector=selector(job))
        jobsets = kube.api_client().call_api(
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{job.namespace}/jobsets",
            "GET",
            auth_settings=["BearerToken"],
            response_type="object",
            _return_http_data_only=True,
        )["items"]
        return not left and not jobsets

    wait_for(gone, timeout=30)
    assert fresh(job).state == JobState.CANCELLED


def test_the_portals_runtime_is_written_and_trainjob_needs_it(
    users: dict[str, User], settings: Any
) -> None:
    # Given the team sync has run: the portal's runtime, Trainer's torch runtime with the
    # portal's restart policy, backoff limit and no API token
    runtime = kube.get("ClusterTrainingRuntime", "gpu-portal-torch", None)
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    assert (node["template"]["spec"]["backoffLimit"], pod["restartPolicy"]) == (0, "Never")
    assert pod["automountServiceAccountToken"] is False
    # When the portal is told to use a runtime the cluster does not have
    settings.TRAINJOB_RUNTIME = "no-such-runtime"
    launchers_forget()
    api = api_client_for(users["alice"])
    found = {row["name"]: row for row in api.get("/api/v1/cluster/launchers/").json()}
    # Then TrainJob is not offered, and asking for one names the field and what is offered,
    # and stores nothing
    assert not found["trainjob"]["served"] and not found["trainjob"]["offered"]
    response = api.post(
        "/api/v1/jobs/", training_spec(name="tj", launcher="trainjob"), format="json"
    )
    assert response.status_code == 400, response.content
    message = response.json()["errors"]["launcher"][0]
    assert "does not offer trainjob" in message
    assert message.endswith("use one of: job, pytorchjob.")
    assert not Job.objects.filter(name="tj").exists()
    launchers_forget()
