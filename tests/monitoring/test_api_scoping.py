"""Monitoring API and pages: scoped to the user's teams (others are 404), ``range``
validated (400 naming it). These are answered before Prometheus is asked."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import JobState
from tests.conftest import api_client_for
from tests.factories import JobFactory


@pytest.fixture
def vision_job(demo: dict[str, Any], alice: User) -> Any:
    return JobFactory(team=demo["teams"]["vision"], owner=alice, state=JobState.RUNNING)


def test_another_teams_job_and_team_are_404(carol: User, vision_job: Any) -> None:
    # Given Carol (team nlp) and a job of team vision
    api = api_client_for(carol)
    # When she asks for the job's GPUs or vision's usage; Then neither exists for her
    assert api.get(f"/api/v1/monitoring/jobs/{vision_job.pk}/gpus/").status_code == 404
    assert api.get("/api/v1/monitoring/teams/vision/usage/").status_code == 404
    client = Client()
    client.force_login(carol)
    assert client.get("/monitoring/teams/vision/").status_code == 404
    assert client.get(f"/monitoring/jobs/{vision_job.pk}/gpus/").status_code == 404
    assert client.get(f"/monitoring/jobs/{vision_job.pk}/").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/monitoring/cluster/?range=2h",
        "/api/v1/monitoring/teams/vision/usage/?range=30d",
        "/api/v1/monitoring/jobs/{job}/gpus/?range=1w",
        # an empty value is not "the default": it is outside the schema's enum too
        "/api/v1/monitoring/cluster/?range=",
        "/api/v1/monitoring/teams/vision/usage/?range=",
        "/api/v1/monitoring/jobs/{job}/gpus/?range=",
    ],
)
def test_unknown_range_is_a_400_naming_range(alice: User, vision_job: Any, path: str) -> None:
    response = api_client_for(alice).get(path.format(job=vision_job.pk))
    assert response.status_code == 400
    body = response.json()
    assert "range" in body["errors"]
    assert "15m, 1h, 6h, 24h, 7d" in body["detail"]


def test_pages_refuse_unknown_range_with_400(alice: User) -> None:
    client = Client()
    client.force_login(alice)
    response = client.get("/monitoring/?range=2h")
    assert response.status_code == 400
    assert response.content.decode().startswith("range: ")


def test_pages_need_a_login(db: Any) -> None:
    assert Client().get("/monitoring/").status_code == 302
    assert Client().get("/api/v1/monitoring/idle/").status_code in (401, 403)


def test_monitoring_api_is_in_the_openapi_schema(alice: User) -> None:
    client = Client()
    client.force_login(alice)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in (
        "/api/v1/monitoring/cluster/",
        "/api/v1/monitoring/teams/{slug}/usage/",
        "/api/v1/monitoring/jobs/{job_id}/gpus/",
        "/api/v1/monitoring/idle/",
    ):
        assert path in schema["paths"], path
        assert "503" in schema["paths"][path]["get"]["responses"], path
