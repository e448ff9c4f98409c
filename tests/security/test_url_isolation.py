"""Every URL in the URLconf, hit as a user of another team and anonymously, gives
404/403/401/405 or a redirect to log in — never the other team's data."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from jobs.models import Job, JobTemplate
from jobs.services.submit import job_submit
from jobs.services.templates import template_create
from tests.conftest import api_client_for, training_spec

pytestmark = pytest.mark.django_db

SECRET_NAME = "vision-secret-experiment"
# Public by design (no team data): home (a redirect), log-in, health, API description, icon.
PUBLIC = {
    "/",
    "/login/",
    "/logout/",
    "/healthz",
    "/readyz",
    "/api/schema/",
    "/api/docs/",
    "/metrics",
    "/favicon.ico",
}
DENIED = {302, 401, 403, 404, 405}


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for entry in patterns:
        regex = entry.pattern.regex.pattern if hasattr(entry.pattern, "regex") else ""
        part = str(entry.pattern)
        if isinstance(entry.pattern, type(get_resolver().pattern)) or regex.startswith("^"):
            part = regex
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + part)
        elif isinstance(entry, URLPattern):
            yield prefix + part


def _concrete(pattern: str, values: dict[str, str]) -> str | None:
    """Fill route converters and regex groups with sample values."""
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: values.get(m.group(1), "jobs"), pattern)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m.group(1), "1"), path)
    path = path.replace("^", "").replace("$", "").replace("\\Z", "").replace("\\", "")
    if any(c in path for c in "()[]*+?|"):
        return None
    return "/" + path.lstrip("/")


@pytest.fixture
def victim_job(alice: User, bob: User) -> Job:
    job = job_submit(user=alice, data=training_spec(name=SECRET_NAME))
    # A team template and a personal one by the same name: carol must see neither.
    template_create(user=bob, name=SECRET_NAME, spec={"image": "x"}, team="vision")
    template_create(user=alice, name=SECRET_NAME, spec={"kind": "training"})
    return job


def _urls(job: Job) -> list[str]:
    values = {
        "job_id": str(job.pk),
        "pk": str(job.pk),
        "object_id": str(job.pk),
        "id": str(job.pk),
        "template_id": str(JobTemplate.objects.filter(team__slug="vision").get().pk),
        "slug": "vision",
        "team": "vision",
        "app_label": "jobs",
        "model_name": "job",
    }
    urls = {_concrete(p, values) for p in _walk(get_resolver().url_patterns)}
    return sorted(u for u in urls if u and not u.startswith("/static/"))


def _check(response: Any, url: str) -> None:
    body = response.content.decode(errors="replace")
    assert SECRET_NAME not in body, f"{url} leaked another team's job"
    if url.rstrip("/") + ("/" if url.endswith("/") else "") in PUBLIC:
        return
    assert response.status_code in DENIED, f"{url} answered {response.status_code}"
    if response.status_code == 302:
        assert "/login/" in response["Location"], f"{url} redirected to {response['Location']}"


def test_the_urlconf_walk_finds_every_job_endpoint(victim_job: Job) -> None:
    urls = _urls(victim_job)
    for expected in (
        f"/jobs/{victim_job.pk}/",
        f"/jobs/{victim_job.pk}/clone/",
        f"/jobs/{victim_job.pk}/cancel/",
        f"/api/v1/jobs/{victim_job.pk}/",
        f"/api/v1/jobs/{victim_job.pk}/manifest/",
        f"/api/v1/jobs/{victim_job.pk}/cancel/",
        "/api/v1/jobs/",
        "/api/v1/me/",
        "/api/v1/teams/",
    ):
        assert expected in urls


@pytest.mark.parametrize("method", ["get", "post"])
def test_another_teams_user_gets_nothing(victim_job: Job, carol: User, method: str) -> None:
    browser = Client()
    browser.force_login(carol)
    api = api_client_for(carol)
    for url in _urls(victim_job):
        client: Client | APIClient = api if url.startswith("/api/") else browser
        response = getattr(client, method)(url)
        if url in (
            "/jobs/",
            "/jobs/new/",
            "/teams/",
            "/api/v1/jobs/",
            "/api/v1/me/",
            "/api/v1/teams/",
            "/api/v1/cohorts/",
            "/api/v1/cluster/nodes/",
            "/api/v1/cluster/launchers/",
            "/api/v1/clusters/",
            "/jobs/new/preview/",
            "/api/v1/jobs/preview/",
            "/jobs/templates/",
            "/api/v1/templates/",
            "/settings/notifications/",
            "/settings/tokens/",
            "/api/v1/notifications/",
            "/api/v1/reports/gpu-hours/",
            # lists scoped to carol's own teams (and the images on offer)
            "/workspaces/",
            "/api/v1/workspaces/",
            "/api/v1/workspace-images/",
        ) or url.startswith(
            ("/monitoring/", "/api/v1/monitoring/cluster", "/api/v1/monitoring/idle")
        ):
            # Carol's own lists and forms: allowed, but never with vision's job in them.
            assert SECRET_NAME not in response.content.decode(errors="replace"), url
            continue
        if url in ("/admin/login/", "/admin/logout/"):
            assert SECRET_NAME not in response.content.decode(errors="replace"), url
            continue
        if url.startswith("/admin/"):
            assert response.status_code == 302 and "/admin/login/" in response["Location"], url
            continue
        _check(response, url)
    assert Job.objects.get(pk=victim_job.pk).state == "queued"  # nothing was cancelled


@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_users_get_nothing(victim_job: Job, method: str) -> None:
    client = Client()
    for url in _urls(victim_job):
        response = getattr(client, method)(url)
        if url.startswith("/admin/"):
            assert SECRET_NAME not in response.content.decode(errors="replace"), url
            if response.status_code == 302:  # to the admin log-in (or from log-out to it)
                assert response["Location"].startswith("/admin/"), url
            continue
        _check(response, url)
    assert Job.objects.get(pk=victim_job.pk).state == "queued"
