"""One API whichever engine admits the jobs (docs/queueing.md): the same OpenAPI schema and
the same job fields with QUEUEING=portal and QUEUEING=kueue, the engine named only in
``queueing``; in Kueue mode the job is handed to Kueue (its LocalQueue, suspended), and in
external mode a team without a LocalQueue is refused, naming the fix, storing nothing."""

from __future__ import annotations

from typing import Any

import yaml
from django.test import Client
from rest_framework.test import APIClient

from jobs.models import Job
from teams.kueue_config import kueue_managed_sync
from teams.models import Team
from tests.conftest import inference_spec, training_spec

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _schema() -> dict[str, Any]:
    response = Client().get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def test_the_openapi_schema_is_the_same_in_both_engines(
    demo: dict[str, Any], settings: Any
) -> None:
    settings.QUEUEING = "portal"
    portal = _schema()
    settings.QUEUEING = "kueue"
    assert _schema() == portal
    job = portal["components"]["schemas"]["JobOutput"]["properties"]
    assert "queueing" in job


def _submit(api: APIClient, **spec: Any) -> dict[str, Any]:
    response = api.post("/api/v1/jobs/", training_spec(**spec), format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_job_has_the_same_fields_in_both_engines(alice_api: APIClient, settings: Any) -> None:
    # Given one job submitted with the portal's engine and one with Kueue
    settings.QUEUEING = "portal"
    portal = alice_api.get(f"/api/v1/jobs/{_submit(alice_api, name='own')['id']}/").json()
    settings.QUEUEING = "kueue"
    kueue = alice_api.get(f"/api/v1/jobs/{_submit(alice_api, name='kueue')['id']}/").json()
    # Then a client reads the same fields of both, and only queueing tells them apart
    assert set(portal) == set(kueue)
    assert (portal["queueing"], kueue["queueing"]) == ("portal", "kueue")
    assert portal["state"] == kueue["state"] == "queued"


def test_kueue_mode_hands_the_job_to_kueue(alice_api: APIClient, settings: Any) -> None:
    # Given Kueue managed by the portal
    settings.QUEUEING = "kueue"
    # When alice submits a training job and an inference service
    training = Job.objects.get(pk=_submit(alice_api, name="train")["id"])
    response = alice_api.post("/api/v1/jobs/", inference_spec(name="serve"), format="json")
    assert response.status_code == 201, response.json()
    serving = Job.objects.get(pk=response.json()["id"])
    # Then the Job names the team's LocalQueue and starts suspended, for Kueue to admit
    (job,) = [m for m in training.manifests if m["kind"] == "Job"]
    assert job["metadata"]["labels"][QUEUE_LABEL] == "gpu-portal"
    assert job["spec"]["suspend"] is True
    # ...the Deployment's pods name it too (Kueue's pod integration), its Service does not
    kinds = {m["kind"]: m for m in serving.manifests}
    assert kinds["Deployment"]["spec"]["template"]["metadata"]["labels"][QUEUE_LABEL]
    assert QUEUE_LABEL not in kinds["Service"]["metadata"]["labels"]
    # ...and the portal's engine never admits either
    assert training.queueing == serving.queueing == "kueue"
    assert training.admitted_at is None and serving.admitted_at is None


def test_the_portals_engine_writes_no_kueue_label(alice_api: APIClient, settings: Any) -> None:
    settings.QUEUEING = "portal"
    job = Job.objects.get(pk=_submit(alice_api)["id"])
    (manifest,) = job.manifests
    assert QUEUE_LABEL not in manifest["metadata"]["labels"]
    assert "suspend" not in manifest["spec"]


def test_external_kueue_needs_the_teams_local_queue(alice_api: APIClient, settings: Any) -> None:
    # Given Kueue run by the platform team, and vision not mapped to a LocalQueue yet
    settings.QUEUEING, settings.KUEUE_MANAGED = "kueue", False
    # When alice submits, Then she is told what is missing and nothing is stored
    response = alice_api.post("/api/v1/jobs/", training_spec(), format="json")
    assert response.status_code == 400
    assert "no Kueue LocalQueue" in response.json()["errors"]["team"][0]
    assert not Job.objects.exists()
    # When an admin maps vision to the platform team's LocalQueue
    Team.objects.filter(slug="vision").update(kueue_local_queue="research-gpus")
    # Then her job goes to that queue
    job = Job.objects.get(pk=_submit(alice_api)["id"])
    assert job.manifests[0]["metadata"]["labels"][QUEUE_LABEL] == "research-gpus"


def test_external_kueue_is_never_written(demo: dict[str, Any], settings: Any) -> None:
    # Given Kueue run by the platform team, and a cluster that cannot even be reached
    settings.QUEUEING, settings.KUEUE_MANAGED = "kueue", False
    settings.KUBECONFIG, settings.KUBE_CONTEXT = "/nonexistent/kubeconfig", ""
    # When the sync of Kueue's configuration runs (cluster_sync, the team tasks)
    # Then it writes nothing, and asks the cluster nothing
    assert kueue_managed_sync() == {}
