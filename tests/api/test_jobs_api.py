"""The jobs REST API: submit, list, read, manifests, preview, cancel, scoped to own teams."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jsonschema
import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from jobs.models import Job, JobEvent
from jobs.services.submit import job_submit
from portal.models import ApiToken
from teams.models import AuditLog
from tests.conftest import api_client_for, inference_spec, training_spec

pytestmark = pytest.mark.django_db


def submit(client: APIClient, spec: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/jobs/", spec, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_submit_returns_the_queued_job_with_its_spec(alice_api: APIClient) -> None:
    response = alice_api.post("/api/v1/jobs/", training_spec(), format="json")

    assert response.status_code == 201
    body = response.json()
    assert body["state"] == "queued"
    assert body["reason"] == "Submitted"
    assert body["team"] == "vision" and body["owner"] == "alice"
    assert body["name"] == "resnet50" and body["kind"] == "training"
    assert body["gpu"] == {"count": 1, "product": None, "sharing": "exclusive", "mig_profile": None}
    assert body["created_at"]
    job = Job.objects.get(pk=body["id"])
    assert job.object_name == f"resnet50-{job.pk}"
    assert job.namespace == "team-vision"
    assert [m["kind"] for m in job.manifests] == ["Job"]
    assert JobEvent.objects.filter(job=job, reason="Submitted").exists()
    assert AuditLog.objects.filter(action="job.submit", actor__username="alice").exists()


def test_submitted_job_demand_counts_gpus_cpu_and_memory_of_every_pod(alice_api: APIClient) -> None:
    body = submit(
        alice_api,
        training_spec(name="dist", gpu={"count": 2, "product": "NVIDIA-A100-SXM4-80GB"}, workers=4),
    )

    job = Job.objects.get(pk=body["id"])
    assert job.gpu_count == 8
    assert job.demand["nvidia.com/gpu"] == 8
    assert job.demand["NVIDIA-A100-SXM4-80GB"] == 8
    assert job.demand["cpu"] == 4 * 16_000  # 8 cores per GPU by default
    assert job.demand["memory"] == 4 * 32 * 1024**3
    assert [m["kind"] for m in job.manifests] == ["Service", "Job"]


def test_list_shows_only_the_users_teams_and_filters(
    alice_api: APIClient, carol_api: APIClient
) -> None:
    submit(alice_api, training_spec(name="a1"))
    submit(alice_api, inference_spec(name="a2"))
    submit(
        carol_api,
        training_spec(team="nlp", name="c1", gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"}),
    )

    names = {j["name"] for j in alice_api.get("/api/v1/jobs/").json()["results"]}
    assert names == {"a1", "a2"}
    by_kind = alice_api.get("/api/v1/jobs/", {"kind": "inference"}).json()
    assert [j["name"] for j in by_kind["results"]] == ["a2"]
    assert alice_api.get("/api/v1/jobs/", {"team": "nlp"}).json()["count"] == 0
    assert alice_api.get("/api/v1/jobs/", {"state": "queued"}).json()["count"] == 2
    assert alice_api.get("/api/v1/jobs/", {"state": "running"}).json()["count"] == 0


@pytest.mark.parametrize(
    ("params", "field"),
    [({"team": "vis\x00ion"}, "team"), ({"state": "sleeping"}, "state"), ({"kind": "x"}, "kind")],
)
def test_a_filter_no_job_can_match_is_refused_naming_it(
    alice_api: APIClient, params: dict[str, str], field: str
) -> None:
    # Given a job, When Alice filters the list by a value no job can have
    submit(alice_api, training_spec(name="a1"))
    response = alice_api.get("/api/v1/jobs/", params)

    # Then the answer is a 400 that names the parameter (a NUL used to be a 500)
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body["errors"] and body["detail"].startswith(f"{field}: ")


def test_list_is_paginated(alice_api: APIClient) -> None:
    for i in range(27):
        submit(alice_api, training_spec(name=f"sweep-{i}", gpu={"count": 0}))

    whole = alice_api.get("/api/v1/jobs/").json()
    first = alice_api.get("/api/v1/jobs/", {"page_size": 25}).json()
    second = alice_api.get(first["next"]).json()

    assert whole["count"] == 27 and len(whole["results"]) == 27 and whole["next"] is None
    assert first["count"] == 27
    assert len(first["results"]) == 25 and len(second["results"]) == 2
    assert second["next"] is None


@pytest.mark.parametrize(
    "method,path",
    [
        ("get", "/api/v1/jobs/{id}/"),
        ("get", "/api/v1/jobs/{id}/manifest/"),
        ("post", "/api/v1/jobs/{id}/cancel/"),
    ],
)
def test_another_teams_job_is_not_found(
    alice_api: APIClient, carol_api: APIClient, method: str, path: str
) -> None:
    job = submit(alice_api, training_spec())

    response = getattr(carol_api, method)(path.format(id=job["id"]))

    assert response.status_code == 404
    assert Job.objects.get(pk=job["id"]).state == "queued"


def test_anonymous_and_bad_tokens_are_refused(alice: User) -> None:
    anonymous = APIClient()
    assert anonymous.get("/api/v1/jobs/").status_code in (401, 403)
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer gpp_not-a-real-token")
    assert bad.get("/api/v1/jobs/").status_code == 401


def test_expired_and_revoked_tokens_are_refused(alice: User) -> None:
    client = api_client_for(alice)
    assert client.get("/api/v1/teams/").status_code == 200
    token = ApiToken.objects.get(user=alice)

    ApiToken.objects.filter(pk=token.pk).update(expires_at="2000-01-01T00:00:00Z")
    assert client.get("/api/v1/teams/").status_code == 401
    ApiToken.objects.filter(pk=token.pk).update(expires_at=None, revoked_at="2000-01-01T00:00:00Z")
    assert client.get("/api/v1/teams/").status_code == 401


def test_a_deactivated_users_token_is_refused(alice: User) -> None:
    client = api_client_for(alice)
    assert client.get("/api/v1/teams/").status_code == 200

    User.objects.filter(pk=alice.pk).update(is_active=False)

    assert client.get("/api/v1/teams/").status_code == 401


def test_a_token_records_its_last_use_at_most_once_a_minute(alice: User) -> None:
    client = api_client_for(alice)
    token = ApiToken.objects.get(user=alice)
    assert token.last_used_at is None

    assert client.get("/api/v1/me/").status_code == 200
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    assert client.get("/api/v1/me/").status_code == 200
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first

    a_while_ago = first - timedelta(minutes=2)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=a_while_ago)
    assert client.get("/api/v1/me/").status_code == 200
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first


def test_a_token_authenticates_its_own_user(alice: User, carol: User) -> None:
    # Each token answers as its owner, whichever token was created first.
    carol_client, alice_client = api_client_for(carol), api_client_for(alice)

    assert alice_client.get("/api/v1/me/").json()["username"] == "alice"
    assert carol_client.get("/api/v1/me/").json()["username"] == "carol"


def test_manifest_as_yaml_and_json(alice_api: APIClient) -> None:
    job = submit(alice_api, inference_spec())

    as_yaml = alice_api.get(f"/api/v1/jobs/{job['id']}/manifest/")
    as_json = alice_api.get(f"/api/v1/jobs/{job['id']}/manifest/", {"format": "json"})

    assert as_yaml.status_code == 200
    assert as_yaml["Content-Type"].startswith("text/yaml")
    documents = list(yaml.safe_load_all(as_yaml.content))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]
    assert as_json.status_code == 200
    assert as_json.json() == documents
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"


def test_manifest_answers_match_the_schema_the_api_documents(alice_api: APIClient) -> None:
    # The fuzz test checks this only when it happens to hit an existing job.
    schema = yaml.safe_load(alice_api.get("/api/schema/").content)
    documented = schema["paths"]["/api/v1/jobs/{job_id}/manifest/"]["get"]["responses"]["200"]
    job = submit(alice_api, inference_spec())
    path = f"/api/v1/jobs/{job['id']}/manifest/"

    as_yaml = list(yaml.safe_load_all(alice_api.get(path).content))
    as_json = alice_api.get(path, {"format": "json"}).json()

    jsonschema.validate(as_yaml, documented["content"]["text/yaml"]["schema"])
    jsonschema.validate(as_json, documented["content"]["application/json"]["schema"])


def test_preview_returns_manifests_and_stores_nothing(alice_api: APIClient) -> None:
    response = alice_api.post("/api/v1/jobs/preview/", training_spec(), format="json")

    assert response.status_code == 200
    body = response.json()
    assert body["valid"] is True
    assert body["manifests"][0]["kind"] == "Job"
    assert "nvidia.com/gpu" in body["yaml"]
    assert body["resource_defaults"]["requests"] == {"cpu": "8", "memory": "16Gi"}
    assert Job.objects.count() == 0


def test_preview_reports_invalid_specs_by_field(alice_api: APIClient) -> None:
    response = alice_api.post(
        "/api/v1/jobs/preview/", training_spec(gpu={"count": 0.5}), format="json"
    )

    assert response.status_code == 400
    assert "gpu.count" in response.json()["errors"]
    assert Job.objects.count() == 0


def test_owner_cancels_a_queued_job(alice_api: APIClient) -> None:
    job = submit(alice_api, training_spec())

    response = alice_api.post(f"/api/v1/jobs/{job['id']}/cancel/")

    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    stored = Job.objects.get(pk=job["id"])
    assert stored.state == "cancelled" and stored.finished_at is not None
    assert stored.events.filter(reason="Cancelled").exists()
    again = alice_api.post(f"/api/v1/jobs/{job['id']}/cancel/")
    assert again.status_code == 409


def test_member_cannot_cancel_a_teammates_job_but_the_lead_can(
    alice_api: APIClient, bob_api: APIClient, demo: dict[str, Any]
) -> None:
    dave = User.objects.create_user("erin", password="pw-for-tests-1")
    demo["teams"]["vision"].memberships.create(user=dave, role="member")
    job = submit(alice_api, training_spec())

    refused = api_client_for(dave).post(f"/api/v1/jobs/{job['id']}/cancel/")
    assert refused.status_code == 403
    assert Job.objects.get(pk=job["id"]).state == "queued"

    allowed = bob_api.post(f"/api/v1/jobs/{job['id']}/cancel/")
    assert allowed.status_code == 200
    assert Job.objects.get(pk=job["id"]).state == "cancelled"


def test_teams_lists_quotas_with_limit_and_use(alice_api: APIClient) -> None:
    teams = alice_api.get("/api/v1/teams/").json()

    assert [t["slug"] for t in teams] == ["vision"]
    quotas = {q["resource"]: q for q in teams[0]["quotas"]}
    assert quotas["nvidia.com/gpu"]["limit"] == 16
    assert quotas["nvidia.com/mig-1g.10gb"]["limit"] == 8
    assert quotas["nvidia.com/gpu.shared"]["limit"] == 8
    assert quotas["nvidia.com/gpu"]["used"] == 0
    assert teams[0]["role"] == "member"


def test_teams_use_counts_admitted_jobs(alice_api: APIClient) -> None:
    job = submit(alice_api, training_spec(gpu={"count": 4}))
    Job.objects.filter(pk=job["id"]).update(admitted_at="2026-01-01T00:00:00Z")

    quotas = {q["resource"]: q for q in alice_api.get("/api/v1/teams/").json()[0]["quotas"]}

    assert quotas["nvidia.com/gpu"]["used"] == 4
    assert quotas["nvidia.com/gpu"]["percent"] == 25


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/jobs/null,null/", "/api/v1/no-such-thing/"])
def test_a_path_no_operation_matches_is_a_json_404_even_in_debug(
    alice_api: APIClient, settings: Any, debug: bool, path: str
) -> None:
    settings.DEBUG = debug
    response = alice_api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}


@pytest.mark.parametrize(
    "query,parameter",
    [
        ("page_size=null", "page_size"),
        ("page=0", "page"),
        ("state=", "state"),
        ("state=nope", "state"),
        ("kind=", "kind"),
        ("state=running&state=queued", "state"),  # which one was meant?
    ],
)
def test_job_list_parameters_outside_the_schema_are_a_400_naming_them(
    alice_api: APIClient, query: str, parameter: str
) -> None:
    response = alice_api.get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400
    assert parameter in response.json()["errors"]


def test_manifest_format_outside_yaml_or_json_is_a_400(alice_api: APIClient, alice: User) -> None:
    job = job_submit(user=alice, data=training_spec(name="fmt"))
    response = alice_api.get(f"/api/v1/jobs/{job.pk}/manifest/?format=AAA")
    assert response.status_code == 400
    assert "format" in response.json()["errors"]


@pytest.mark.parametrize("spec", [training_spec(), inference_spec()], ids=["training", "inference"])
def test_a_jobs_spec_as_returned_can_be_submitted_again(
    alice_api: APIClient, spec: dict[str, Any]
) -> None:
    # Given a job, read back through the API (what `gpuportal clone` does)
    created = submit(alice_api, spec)
    returned = alice_api.get(f"/api/v1/jobs/{created['id']}/").json()["spec"]

    # When its spec is sent again, Then it is accepted as it is
    again = alice_api.post("/api/v1/jobs/", returned, format="json")

    assert again.status_code == 201, again.json()
    assert again.json()["spec"] == returned
