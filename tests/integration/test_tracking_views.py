"""Following a running job through the API and the page, against a real sandbox cluster
and a real Celery worker: log tail, GPU nodes with what is allocated, live pods."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from tests.conftest import api_client_for, training_spec
from tests.sandbox_process import SandboxProcess
from tests.worker_process import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.fixture
def users(worker: WorkerProcess) -> dict[str, User]:
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    return {u.username: u for u in User.objects.all()}


@pytest.fixture
def running_job(users: dict[str, User]) -> Job:
    """A 2-GPU A100 training job of Alice's that runs for an hour (simulated)."""
    job = job_submit(
        user=users["alice"],
        data=training_spec(
            name="tracked",
            env={"SANDBOX_DURATION": "1h"},
            gpu={"count": 2, "product": A100},
        ),
    )
    return wait_for(
        lambda: (j := Job.objects.get(pk=job.pk)).state == JobState.RUNNING and j, timeout=40
    )


def test_log_tail_returns_at_most_the_asked_lines_of_training_output(
    users: dict[str, User], running_job: Job
) -> None:
    # Given a running training job, and Alice's API client
    api = api_client_for(users["alice"])

    # When she asks for the last 20 lines once training has printed some steps
    def logs_with_steps() -> dict[str, Any] | None:
        response = api.get(f"/api/v1/jobs/{running_job.pk}/logs/", {"tail": "20"})
        assert response.status_code == 200, response.content
        body = response.json()
        if body["pods"] and all("loss=" in p["log"] for p in body["pods"]):
            return body
        return None

    body = wait_for(logs_with_steps, timeout=30)

    # Then each pod's log has at most 20 lines of training output, and says where it runs
    assert body["error"] is None
    assert len(body["pods"]) == 1
    pod = body["pods"][0]
    lines = pod["log"].splitlines()
    assert 0 < len(lines) <= 20
    assert any(line.startswith("epoch ") and "loss=" in line for line in lines)
    assert pod["node"].startswith("gpu-a100-")
    assert pod["pod"].startswith(f"tracked-{running_job.pk}-")


def test_cluster_nodes_show_the_jobs_gpus_as_allocated(
    users: dict[str, User], running_job: Job, cluster: SandboxProcess
) -> None:
    # Given the running job's pod is bound to an A100 node
    [node_name] = running_job.placement["nodes"]

    # When Carol (another team: the cluster view is for every logged-in user) lists GPU nodes
    response = api_client_for(users["carol"]).get("/api/v1/cluster/nodes/")

    # Then every GPU node of the sandbox is there, and not the CPU node
    assert response.status_code == 200
    nodes = {n["name"]: n for n in response.json()}
    assert set(nodes) == {"gpu-a100-0", "gpu-a100-1", "gpu-t4-shared-0", "gpu-a100-mig-0"}
    # and the job's node shows its 2 GPUs allocated out of 8
    node = nodes[node_name]
    assert node["gpu_product"] == A100
    assert node["gpus_allocatable"] == 8
    assert node["gpus_allocated"] == 2
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in node["taints"]
    assert node["unschedulable"] is False
    other = nodes[({"gpu-a100-0", "gpu-a100-1"} - {node_name}).pop()]
    assert other["gpus_allocated"] == 0
    # and the MIG and time-sliced nodes report their own resources
    mig = {m["resource"]: m for m in nodes["gpu-a100-mig-0"]["mig"]}
    assert mig["nvidia.com/mig-1g.10gb"]["allocatable"] == 14
    shared = nodes["gpu-t4-shared-0"]["shared"]
    assert shared["resource"] == "nvidia.com/gpu.shared" and shared["allocatable"] == 8


def test_live_partial_lists_the_pod_with_its_node(users: dict[str, User], running_job: Job) -> None:
    # Given Alice is logged in and her job runs
    client = Client()
    client.force_login(users["alice"])

    # When the job page's live part refreshes
    page = client.get(f"/jobs/{running_job.pk}/live/").content.decode()

    # Then it lists the pod, read from the cluster, on its node, and keeps polling
    [node_name] = running_job.placement["nodes"]
    [pod] = running_job.placement["pods"]
    assert pod["name"] in page
    assert node_name in page
    assert 'data-testid="job-state">running<' in page
    assert 'hx-trigger="every 2s"' in page
    assert "cluster unreachable" not in page
    assert "<td>running</td>" in page  # the container state comes from the live pod
