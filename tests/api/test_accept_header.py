"""The API answers JSON whatever a client's Accept header, when the header names no media
type (found by the API fuzz: ``Accept:`` with no value got a 406 nobody documented)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("accept", ["", " ", ";", ", ;"])
def test_an_accept_header_without_a_media_type_gets_json(alice: User, accept: str) -> None:
    response = api_client_for(alice).get("/api/v1/jobs/", HTTP_ACCEPT=accept)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["results"] == []


def test_an_accept_header_naming_only_other_types_is_still_refused(alice: User) -> None:
    response = api_client_for(alice).get("/api/v1/jobs/", HTTP_ACCEPT="application/xml")

    assert response.status_code == 406
