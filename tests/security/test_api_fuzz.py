"""Schemathesis over the whole REST API, as a real user with a bearer token.

Every operation in the OpenAPI schema (``/api/schema/``, served by the app itself) gets
generated requests, valid and invalid, against the demo data and a sandbox cluster. Every
answer must be documented: no server error, a status code the schema lists for the
operation, and the content type and body the schema describes.

The one 5xx allowed is a 503 the operation documents, when a service it reads from is not
there: the sandbox is, Prometheus is not (its 503 is the designed answer, see
``tests/monitoring/test_prometheus_down.py``).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
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

from cluster import kube
from jobs.services import job_submit
from portal.services import api_token_create
from portal.wsgi import application
from tests.conftest import inference_spec, training_spec
from tests.sandbox_process import SandboxProcess, start_sandbox

EXAMPLES_PER_OPERATION = 20


@schemathesis.deserializer("text/yaml")
def yaml_stream(ctx: Any, response: Any) -> list[Any]:
    """A YAML answer is a stream of documents (the manifests, one per object); the schema
    documents them as a list, in order. Schemathesis would read one document only."""
    return list(yaml.safe_load_all(response.content.decode(response.encoding or "utf-8")))


def no_undocumented_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    """``not_a_server_error``, except for a 503 the operation documents."""
    documented = {str(code) for code in case.operation.definition.raw.get("responses", {})}
    if response.status_code == 503 and "503" in documented:
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [
    no_undocumented_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    proc = start_sandbox(tmp_path_factory.mktemp("cluster"), profile="small", speed=30.0)
    yield proc
    proc.stop()


@pytest.fixture
def api_schema(db: Any, sandbox: SandboxProcess, settings: Any) -> Iterator[Any]:
    """The schema as the app serves it; requests go straight to the WSGI app.

    Like Django's test client, keep the database connection open across requests: the
    handler would close it at the end of each one, and with it the test's transaction.
    """
    settings.KUBECONFIG = str(Path(sandbox.kubeconfig))
    settings.KUBE_CONTEXT = ""
    settings.KUBE_REQUEST_TIMEOUT = 5.0
    settings.PROMETHEUS_TIMEOUT = 0.5
    # Hundreds of generated writes a minute are the point here, not a client to slow down.
    settings.API_WRITE_RATE = "100000/minute"
    kube.reset_client()
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", application)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
        kube.reset_client()


@pytest.fixture
def bearer(db: Any) -> dict[str, str]:
    """Demo data with a training and an inference job of alice's, and her bearer token."""
    call_command("seed_demo", stdout=io.StringIO())
    alice = User.objects.get(username="alice")
    job_submit(user=alice, data=training_spec())
    job_submit(user=alice, data=inference_spec())
    _, secret = api_token_create(user=alice, description="schemathesis")
    return {"Authorization": f"Bearer {secret}"}


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    # Fixtures are per operation on purpose (the demo data and token stay the same).
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_answers_as_documented(case: Any, bearer: dict[str, str]) -> None:
    # Given a generated request for an operation, sent with alice's token
    # When the app answers, Then the answer is documented and never a server error
    case.call_and_validate(headers=bearer, checks=CHECKS)
