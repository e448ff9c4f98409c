"""The workspaces REST API: images, create (with the workspace image's fields refused when
sent), list, read, stop and start permissions, delete, and the token kept out of every
answer. (Running them for real: tests/integration/test_workspaces.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs.models import Job, JobState, WorkspaceImage
from jobs.selectors.workspace_access import workspace_token
from teams.models import AuditLog, Team
from tests.conftest import api_client_for, workspace_spec

pytestmark = pytest.mark.django_db


def create(client: APIClient, **overrides: Any) -> dict[str, Any]:
    spec = workspace_spec(**overrides)
    spec.pop("kind")  # implied by the endpoint
    response = client.post("/api/v1/workspaces/", spec, format="json")
    assert response.status_code == 201, response.json()
    return dict(response.json())


def test_the_images_are_the_enabled_ones(alice_api: APIClient) -> None:
    images = {i["name"]: i for i in alice_api.get("/api/v1/workspace-images/").json()}
    assert {"jupyter-pytorch", "jupyter-tensorflow", "code-server"} <= set(images)
    assert images["code-server"]["flavor"] == "code-server"
    WorkspaceImage.objects.filter(name="jupyter-tensorflow").update(enabled=False)
    names = [i["name"] for i in alice_api.get("/api/v1/workspace-images/").json()]
    assert "jupyter-tensorflow" not in names


def test_create_returns_the_queued_workspace_with_where_to_open_it(
    alice_api: APIClient,
) -> None:
    body = create(alice_api)
    assert (body["kind"], body["state"], body["owner"]) == ("workspace", "queued", "alice")
    assert body["url"] == f"http://testserver/workspaces/{body['id']}/"
    assert body["workspace_image"] == "jupyter-pytorch"
    assert body["home_claim"] == "home-alice"
    assert body["can_open"] is True
    job = Job.objects.get(pk=body["id"])
    assert job.spec["image"] == "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-24"
    assert [m["kind"] for m in job.manifests] == ["Secret", "Deployment", "Service"]
    # it is also a job, listed with the others
    listed = alice_api.get("/api/v1/jobs/?kind=workspace").json()["results"]
    assert [j["id"] for j in listed] == [body["id"]]


@pytest.mark.parametrize(
    ("field", "value"),
    [("image", "evil.example/miner:1"), ("command", ["sh"]), ("port", 9999)],
)
def test_what_the_workspace_image_decides_is_refused_naming_the_field(
    alice_api: APIClient, field: str, value: Any
) -> None:
    response = alice_api.post(
        "/api/v1/workspaces/", workspace_spec(**{field: value}), format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"][field] == [
        f"A workspace's {field} comes from its workspace image; remove '{field}' and pick "
        "the image with workspace_image."
    ]
    assert not Job.objects.exists()


def test_an_unknown_or_missing_workspace_image_is_refused_naming_the_choices(
    alice_api: APIClient,
) -> None:
    response = alice_api.post(
        "/api/v1/workspaces/", workspace_spec(workspace_image="rstudio"), format="json"
    )
    assert response.status_code == 400
    assert "there is no workspace image 'rstudio'; use one of:" in response.json()["detail"]
    assert "jupyter-pytorch" in response.json()["detail"]
    missing = workspace_spec()
    missing.pop("workspace_image")
    response = alice_api.post("/api/v1/workspaces/", missing, format="json")
    assert response.status_code == 400
    assert "workspace_image" in response.json()["errors"]
    assert not Job.objects.exists()


def test_the_servers_token_is_in_no_answer(alice_api: APIClient) -> None:
    body = create(alice_api)
    job = Job.objects.get(pk=body["id"])
    token = workspace_token(job)
    for path in (
        f"/api/v1/workspaces/{job.pk}/",
        f"/api/v1/jobs/{job.pk}/",
        f"/api/v1/jobs/{job.pk}/manifest/",
        f"/api/v1/jobs/{job.pk}/manifest/?format=json",
    ):
        assert token not in alice_api.get(path).content.decode(), path
    assert token not in str(job.manifests)


def test_another_team_gets_404_and_a_lead_may_stop_but_not_open(
    alice_api: APIClient, demo: dict[str, Any]
) -> None:
    body = create(alice_api)
    users = {u.username: u for u in User.objects.all()}
    for who in ("carol", "dave"):
        other = api_client_for(users[who])
        assert other.get(f"/api/v1/workspaces/{body['id']}/").status_code == 404
        assert other.post(f"/api/v1/workspaces/{body['id']}/stop/").status_code == 404
    bob = api_client_for(users["bob"])  # vision's lead
    assert bob.get(f"/api/v1/workspaces/{body['id']}/").json()["can_open"] is False
    # a platform admin opens none, not even where leads may (a notebook holds its owner's
    # credentials)
    Team.objects.filter(slug="vision").update(workspace_leads_may_open=True)
    admin = api_client_for(users["admin"])
    assert bob.get(f"/api/v1/workspaces/{body['id']}/").json()["can_open"] is True
    assert admin.get(f"/api/v1/workspaces/{body['id']}/").json()["can_open"] is False
    Team.objects.filter(slug="vision").update(workspace_leads_may_open=False)
    stopped = bob.post(f"/api/v1/workspaces/{body['id']}/stop/")
    assert stopped.status_code == 200
    # never applied: stopped at once, out of the queue
    assert stopped.json()["state"] == JobState.STOPPED
    assert AuditLog.objects.filter(action="workspace.stop", actor__username="bob").exists()
    started = alice_api.post(f"/api/v1/workspaces/{body['id']}/start/")
    assert started.status_code == 200 and started.json()["state"] == "queued"
    assert alice_api.post(f"/api/v1/workspaces/{body['id']}/start/").status_code == 409


def test_delete_keeps_the_home_and_lists_no_more(alice_api: APIClient) -> None:
    body = create(alice_api)
    deleted = alice_api.delete(f"/api/v1/workspaces/{body['id']}/")
    assert deleted.status_code == 200 and deleted.json()["state"] == "cancelled"
    assert alice_api.get("/api/v1/workspaces/").json() == []


def test_a_training_job_is_not_a_workspace(alice_api: APIClient) -> None:
    response = alice_api.post(
        "/api/v1/workspaces/", {**workspace_spec(), "kind": "training"}, format="json"
    )
    assert response.status_code == 400
    assert "kind" in response.json()["errors"]


def test_listing_workspaces_asks_the_database_as_often_for_twelve_as_for_two(
    alice_api: APIClient, demo: dict[str, Any]
) -> None:
    # bob (vision's lead) sees alice's workspaces; what he may do is worked out per page,
    # not asked of the database once per workspace
    Team.objects.filter(slug="vision").update(workspace_leads_may_open=True)
    bob = demo["users"]["bob"]
    api = api_client_for(bob)
    page = Client()
    page.force_login(bob)

    def queries() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as listed:
            assert api.get("/api/v1/workspaces/").status_code == 200
        with CaptureQueriesContext(connection) as shown:
            assert page.get("/workspaces/").status_code == 200
        return len(listed), len(shown)

    for n in range(2):
        create(alice_api, name=f"ws-{n}")
    queries()  # once to warm what is asked once per client (its token's last use)
    few = queries()
    for n in range(2, 12):
        create(alice_api, name=f"ws-{n}")
    assert queries() == few
    body = api.get("/api/v1/workspaces/").json()
    assert len(body) == 12 and all(w["can_open"] for w in body)
