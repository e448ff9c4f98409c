"""The preview's "will it fit?" answer against a real sandbox cluster."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.test import APIClient

from cluster import kube
from cluster.labels import MANAGED_BY_SELECTOR
from cluster.launchers import launchers_forget
from jobs.models import Job
from jobs.services.admission import admission_run
from jobs.services.apply import job_apply
from jobs.services.submit import job_submit
from tests.conftest import api_client_for, training_spec
from tests.sandbox_process import SandboxProcess
from tests.worker_process import wait_for

pytestmark = pytest.mark.django_db


def preview(client: APIClient, **spec: Any) -> dict[str, Any]:
    response = client.post("/api/v1/jobs/preview/", training_spec(**spec), format="json")
    assert response.status_code == 200, response.json()
    return response.json()["fit"]


def run_job(user: User, **spec: Any) -> Job:
    """Submit, admit and apply synchronously (no worker), then wait until its pods are bound."""
    job = job_submit(user=user, data=training_spec(env={"SANDBOX_DURATION": "1h"}, **spec))
    admission_run(team_id=job.team_id)
    assert job_apply(job_id=job.pk) == "applied"

    def bound() -> bool:
        pods = list(kube.list_all("Pod", label_selector=f"gpu-portal.dev/job-id={job.pk}"))
        return bool(pods) and all(p["spec"].get("nodeName") for p in pods)

    wait_for(bound, timeout=20)
    return job


def test_a_small_job_fits_now(cluster: SandboxProcess, alice_api: APIClient) -> None:
    fit = preview(alice_api, gpu={"count": 1})

    assert fit["verdict"] == "fits"
    assert fit["nodes"] and fit["nodes"][0].startswith("gpu-a100-")


def test_a_product_the_cluster_lacks_can_never_fit(
    cluster: SandboxProcess, alice_api: APIClient
) -> None:
    fit = preview(alice_api, gpu={"count": 1, "product": "NVIDIA-H100-80GB-HBM3"})

    assert fit["verdict"] == "never"
    assert "NVIDIA-H100-80GB-HBM3" in fit["message"]
    assert fit["scheduler_message"].startswith("0/5 nodes are available")


def test_full_cluster_waits_preempts_or_waits_for_quota(
    cluster: SandboxProcess, alice: User, carol: User, alice_api: APIClient
) -> None:
    # Given vision's two low-priority 8-GPU jobs fill both A100 nodes (and its 16-GPU quota)
    low_jobs = [run_job(alice, name=f"fill{i}", gpu={"count": 8}, priority="low") for i in (1, 2)]
    carol_api = api_client_for(carol)
    a100 = {"count": 8, "product": "NVIDIA-A100-SXM4-80GB"}

    # Then nlp's high-priority job would preempt one of them
    high = preview(carol_api, team="nlp", gpu=a100, priority="high")
    assert high["verdict"] == "preempts"
    assert len(high["preempted_jobs"]) == 1
    assert high["preempted_jobs"][0] in {j.pk for j in low_jobs}
    # a low-priority (preemptionPolicy: Never) job waits for running jobs to finish
    low = preview(carol_api, team="nlp", gpu=a100, priority="low")
    assert low["verdict"] == "waits"
    assert "finish" in low["message"]
    # and vision's own next low-priority job waits for its quota first
    mine = preview(alice_api, gpu={"count": 8}, priority="low")
    assert (mine["verdict"], mine["quota"]) == ("waits-for-quota", "waits")
    assert "uses 16 of 16 nvidia.com/gpu" in mine["message"]
    # while its high-priority one would evict the newest of its own low-priority jobs
    urgent = preview(alice_api, gpu={"count": 8}, priority="high")
    assert (urgent["verdict"], urgent["quota"]) == ("preempts", "preempts")
    assert urgent["preempted_jobs"] == [low_jobs[1].pk]
    assert "team vision's lower-priority jobs: vision #" in urgent["message"]
    for kind in ("Job",):
        for obj in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR):
            kube.delete(kind, obj["metadata"]["name"], obj["metadata"]["namespace"])


def test_no_cluster_means_unknown_not_an_error(alice_api: APIClient, tmp_path: Any) -> None:
    with override_settings(KUBECONFIG=str(tmp_path / "missing-kubeconfig")):
        kube.reset_client()
        fit = preview(alice_api, gpu={"count": 1})
    kube.reset_client()

    assert fit["verdict"] == "unknown"
    assert "Cannot check the cluster" in fit["message"]


def test_a_time_sliced_job_on_a_named_product_fits_the_shared_nodes(
    cluster: SandboxProcess, alice_api: APIClient
) -> None:
    # GFD labels time-sliced nodes "Tesla-T4-SHARED"; asking for "Tesla-T4" must still match.
    fit = preview(alice_api, gpu={"count": 1, "sharing": "shared", "product": "Tesla-T4"})

    assert fit["verdict"] == "fits", fit
    assert fit["nodes"][0].startswith("gpu-t4-shared-")


@pytest.mark.parametrize("launcher", ["job", "pytorchjob", "trainjob"])
def test_every_launchers_pods_are_the_ones_previewed(
    cluster: SandboxProcess, alice_api: APIClient, settings: Any, launcher: str
) -> None:
    # Given Trainer's shipped runtime as the portal's (no team sync here)
    settings.TRAINJOB_RUNTIME = "torch-distributed"
    launchers_forget()
    # When alice previews two workers of 8 GPUs each, Then both whole A100 nodes are taken,
    # one per worker, whatever object runs them (not "nothing to schedule")
    fit = preview(alice_api, name=f"p-{launcher}", launcher=launcher, workers=2, gpu={"count": 8})
    launchers_forget()
    assert fit["verdict"] == "fits", fit
    assert len(set(fit["nodes"])) == 2 and all(n.startswith("gpu-a100-") for n in fit["nodes"])
