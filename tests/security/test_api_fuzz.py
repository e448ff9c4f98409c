"""Schemathesis over the whole REST API, as a real user with a bearer token.

Every operation in the OpenAPI schema (``/api/schema/``, served by the app itself) gets
generated requests, valid and invalid, against the demo data. Every answer must be
documented: no 5xx, a status code the schema lists for the operation, the content type
and body the schema describes.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from jobs.services import job_submit
from portal.services import api_token_create
from portal.wsgi import application
from tests.conftest import inference_spec, training_spec

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def api_schema(db: Any) -> Iterator[Any]:
    """The schema as the app serves it, with requests made straight to the WSGI app.

    Like Django's test client, keep the database connection open across requests: the
    handler would close it at the end of each one, and with it the test's transaction.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", application)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(db: Any) -> dict[str, str]:
    """Demo data with a few jobs of alice's, and alice's bearer token."""
    call_command("seed_demo", stdout=io.StringIO())
    alice = User.objects.get(username="alice")
    job_submit(user=alice, data=training_spec())
    job_submit(user=alice, data=inference_spec())
    _, secret = api_token_create(user=alice, description="schemathesis")
    return {"Authorization": f"Bearer {secret}"}


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_as_documented(case: Any, bearer: dict[str, str]) -> None:
    # Given a generated request for an operation, sent with alice's token
    # When the app answers, Then the answer is documented and never a server error
    case.call_and_validate(headers=bearer, checks=CHECKS)
