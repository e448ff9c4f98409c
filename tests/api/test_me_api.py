"""GET /api/v1/me/: who the bearer token belongs to and the teams they may submit to."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.conftest import api_client_for
from tests.factories import MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


def test_anonymous_callers_get_401_with_the_bearer_challenge() -> None:
    response = APIClient().get("/api/v1/me/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_invalid_token_gets_401(demo: dict[str, Any]) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer gpp_not-a-real-token")

    assert client.get("/api/v1/me/").status_code == 401


def test_a_token_answers_with_its_user_and_only_their_teams(alice_api: APIClient) -> None:
    # Given alice (member of vision) and teams nlp and speech she does not belong to
    # When she asks who she is with her token
    response = alice_api.get("/api/v1/me/")

    # Then she sees herself and vision only, with her role
    assert response.status_code == 200
    assert response.json() == {
        "username": "alice",
        "is_platform_admin": False,
        "teams": [
            {"slug": "vision", "name": "Vision", "namespace": "team-vision", "role": "member"}
        ],
        "queueing": "portal",
    }


def test_me_says_which_engine_admits_jobs(alice_api: APIClient, settings: Any) -> None:
    # Given a portal running on the cluster's Kueue
    settings.QUEUEING = "kueue"
    # When a client asks who it is, Then it learns Kueue admits its jobs
    assert alice_api.get("/api/v1/me/").json()["queueing"] == "kueue"


def test_teams_come_in_slug_order_with_the_role_in_each(bob: User) -> None:
    MembershipFactory(user=bob, team=TeamFactory(slug="audio"), role="member")

    body = api_client_for(bob).get("/api/v1/me/").json()

    assert [(t["slug"], t["role"]) for t in body["teams"]] == [
        ("audio", "member"),
        ("vision", "lead"),
    ]


def test_platform_admins_lead_every_team(admin_user: User) -> None:
    body = api_client_for(admin_user).get("/api/v1/me/").json()

    assert body["is_platform_admin"] is True
    assert [(t["slug"], t["role"]) for t in body["teams"]] == [
        ("nlp", "lead"),
        ("robotics", "lead"),
        ("speech", "lead"),
        ("vision", "lead"),
    ]


def test_it_costs_one_query_beyond_authentication(
    alice_api: APIClient, django_assert_num_queries: Any
) -> None:
    alice_api.get("/api/v1/me/")  # the token's last-used time is written on first use

    # Then: the token (with its user) and the memberships (with their teams)
    with django_assert_num_queries(2):
        assert alice_api.get("/api/v1/me/").status_code == 200


def test_it_is_in_the_openapi_schema(alice_api: APIClient) -> None:
    schema = alice_api.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    operation = schema["paths"]["/api/v1/me/"]["get"]
    assert operation["operationId"] == "me_retrieve"
    assert set(operation["responses"]) == {"200", "401"}
