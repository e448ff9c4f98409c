"""Job templates: saved specs (a user's or a team's), and submitting from one."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from jobs.models import Job, JobTemplate
from teams.models import AuditLog
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db

A100_BASE = {
    "kind": "training",
    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
    "command": ["torchrun", "train.py"],
    "gpu": {"count": 2, "product": "NVIDIA-A100-SXM4-80GB"},
    "env": {"NCCL_DEBUG": "INFO", "SEED": "1"},
}


def create(client: APIClient, **body: Any) -> dict[str, Any]:
    response = client.post("/api/v1/templates/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_personal_template_holds_any_subset_of_the_spec(alice_api: APIClient) -> None:
    body = create(alice_api, name="a100-base", spec=A100_BASE)

    assert body["owner"] == "alice" and body["team"] is None
    assert body["spec"] == A100_BASE  # only what was given: no defaults filled in
    listed = alice_api.get("/api/v1/templates/").json()
    assert [t["name"] for t in listed] == ["a100-base"]
    assert AuditLog.objects.filter(action="template.create").count() == 1


def test_a_template_field_is_checked_as_a_submission_checks_it(alice_api: APIClient) -> None:
    unknown = alice_api.post(
        "/api/v1/templates/", {"name": "bad", "spec": {"colour": "red"}}, format="json"
    )
    fractional = alice_api.post(
        "/api/v1/templates/", {"name": "bad", "spec": {"gpu": {"count": "0.5"}}}, format="json"
    )

    assert unknown.status_code == 400 and "spec.colour" in unknown.json()["errors"]
    assert fractional.status_code == 400
    errors = fractional.json()["errors"]
    assert "spec.gpu.count" in errors and "MIG" in " ".join(errors["spec.gpu.count"])
    assert not JobTemplate.objects.exists()


def test_submitting_from_a_template_merges_the_callers_fields_over_it(
    alice_api: APIClient,
) -> None:
    create(alice_api, name="a100-base", spec=A100_BASE)

    response = alice_api.post(
        "/api/v1/jobs/?template=a100-base",
        {"team": "vision", "name": "from-template", "gpu": {"count": 4}, "env": {"SEED": "7"}},
        format="json",
    )

    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.spec["gpu"]["count"] == 4
    assert job.spec["gpu"]["product"] == "NVIDIA-A100-SXM4-80GB"  # kept from the template
    assert job.spec["env"] == {"NCCL_DEBUG": "INFO", "SEED": "7"}
    assert job.spec["command"] == ["torchrun", "train.py"]


def test_a_submission_from_a_template_still_goes_through_every_check(
    alice_api: APIClient,
) -> None:
    create(alice_api, name="a100-base", spec=A100_BASE)

    response = alice_api.post(
        "/api/v1/jobs/?template=a100-base",
        {"team": "vision", "name": "too-big", "gpu": {"count": 64}},
        format="json",
    )

    assert response.status_code == 400
    assert "gpu.count" in response.json()["errors"]
    assert not Job.objects.exists()


def test_the_preview_answers_will_it_fit_for_a_template(alice_api: APIClient) -> None:
    create(alice_api, name="a100-base", spec=A100_BASE)

    response = alice_api.post(
        "/api/v1/jobs/preview/?template=a100-base",
        {"team": "vision", "name": "preview-me"},
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert response.json()["fit"]["verdict"]
    assert "nvidia.com/gpu: '2'" in response.json()["yaml"]


def test_an_unknown_template_is_a_404_naming_it(alice_api: APIClient) -> None:
    response = alice_api.post("/api/v1/jobs/?template=nope", training_spec(), format="json")

    assert response.status_code == 404
    assert "nope" in response.json()["detail"]
    assert not Job.objects.exists()


def test_team_templates_are_managed_by_leads_and_used_by_members(
    alice_api: APIClient, bob_api: APIClient, carol_api: APIClient
) -> None:
    refused = alice_api.post(
        "/api/v1/templates/", {"name": "t", "team": "vision", "spec": A100_BASE}, format="json"
    )
    assert refused.status_code == 403

    team_template = create(bob_api, name="vision-a100", team="vision", spec=A100_BASE)
    assert team_template["team"] == "vision"

    # A member submits from it by name; the team's template fills in its team.
    response = alice_api.post(
        "/api/v1/jobs/?template=vision/vision-a100", {"name": "member-run"}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["team"] == "vision"
    # A member may not change it; another team cannot see it.
    assert alice_api.delete(f"/api/v1/templates/{team_template['id']}/").status_code == 403
    assert carol_api.get(f"/api/v1/templates/{team_template['id']}/").status_code == 404
    assert bob_api.delete(f"/api/v1/templates/{team_template['id']}/").status_code == 204


def test_a_name_is_unique_per_owner(alice_api: APIClient, bob_api: APIClient) -> None:
    create(alice_api, name="base", spec={"kind": "training"})
    create(bob_api, name="base", spec={"kind": "training"})  # another owner: fine

    again = alice_api.post("/api/v1/templates/", {"name": "base", "spec": {}}, format="json")

    assert again.status_code == 409
    assert "name" in again.json()["errors"]


def test_save_as_template_and_new_from_template_in_the_browser(
    alice: User, alice_api: APIClient
) -> None:
    job_id = alice_api.post("/api/v1/jobs/", training_spec(name="keep-me"), format="json").json()[
        "id"
    ]
    client = Client()
    client.force_login(alice)

    saved = client.post(f"/jobs/{job_id}/save-template/", {"name": "resnet-base"}, follow=True)

    assert "Saved as template resnet-base" in saved.content.decode()
    template = JobTemplate.objects.get(name="resnet-base")
    assert "name" not in template.spec and template.spec["image"].startswith("nvcr.io")
    page = client.get(f"/jobs/new/?template={template.pk}").content.decode()
    assert 'data-testid="template-note"' in page
    assert 'value="nvcr.io/nvidia/pytorch:24.05-py3"' in page
    listing = client.get("/jobs/templates/").content.decode()
    assert "resnet-base" in listing
