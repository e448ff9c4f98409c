"""Login throttling, logout, audit of authentication, API write throttling, security headers."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from jobs.models import Job
from teams.models import AuditLog
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db


def login(client: Client, username: str, password: str) -> Any:
    return client.post("/login/", {"username": username, "password": password})


def test_failed_and_successful_logins_are_audited(alice: User) -> None:
    client = Client()

    login(client, "alice", "wrong")
    response = login(client, "alice", "demo")

    assert response.status_code == 302
    actions = list(AuditLog.objects.order_by("id").values_list("action", "target"))
    assert ("auth.login_failed", "alice") in actions
    assert ("auth.login", "alice") in actions
    assert not AuditLog.objects.filter(changes__icontains="wrong").exists()


def test_repeated_failures_lock_the_account_even_with_the_right_password(alice: User) -> None:
    client = Client()
    for _ in range(5):
        login(client, "alice", "wrong")

    response = login(client, "alice", "demo")

    assert response.status_code == 429
    assert b"Too many failed log-ins" in response.content
    assert "_auth_user_id" not in client.session


def test_logout_invalidates_the_session(alice: User) -> None:
    client = Client()
    login(client, "alice", "demo")
    old_key = client.session.session_key
    assert client.get("/jobs/").status_code == 200

    client.post("/logout/")

    assert client.get("/jobs/").status_code == 302
    stolen = Client()
    stolen.cookies["sessionid"] = old_key
    assert stolen.get("/jobs/").status_code == 302  # the old session id is dead
    assert AuditLog.objects.filter(action="auth.logout").exists()


def test_forms_need_a_csrf_token(alice: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    response = client.post("/jobs/new/", {"team": "vision", "name": "x"})

    assert response.status_code == 403
    assert Job.objects.count() == 0


def test_api_writes_are_throttled_per_user(
    alice_api: APIClient, bob_api: APIClient, settings: Any
) -> None:
    settings.API_WRITE_RATE = "3/min"

    codes = [
        alice_api.post("/api/v1/jobs/", training_spec(name=f"t{i}"), format="json").status_code
        for i in range(4)
    ]

    assert codes == [201, 201, 201, 429]
    assert Job.objects.count() == 3
    assert alice_api.get("/api/v1/jobs/").status_code == 200  # reads are not throttled
    assert bob_api.post("/api/v1/jobs/", training_spec(name="b"), format="json").status_code == 201


def test_pages_carry_security_headers(alice: User) -> None:
    client = Client()
    client.force_login(alice)

    response = client.get("/jobs/")

    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("style-src")[0]
    assert "frame-ancestors 'none'" in csp
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.parametrize("path", ["/jobs/", "/jobs/new/", "/teams/", "/login/", "/api/docs/"])
def test_no_page_has_inline_scripts(alice: User, path: str) -> None:
    client = Client()
    client.force_login(alice)

    html = client.get(path).content.decode()

    for chunk in html.split("<script")[1:]:
        tag = chunk.split(">", 1)[0]
        assert "src=" in tag or 'type="application/json"' in tag, f"inline script on {path}"
