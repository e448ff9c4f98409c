"""Prometheus down: pages still render (200) with a "metrics unavailable: <why>" panel;
the API answers 503 with the same words."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from jobs.models import JobState
from monitoring import prometheus
from tests.conftest import api_client_for
from tests.factories import JobFactory
from tests.monitoring.prometheus_process import free_port


@pytest.fixture
def prometheus_down(settings: Any) -> str:
    """A PROMETHEUS_URL nothing listens on (and no cluster configured either)."""
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    settings.PROMETHEUS_TIMEOUT = 2.0
    settings.KUBECONFIG = "/nonexistent/kubeconfig"
    prometheus.reset_client()
    yield settings.PROMETHEUS_URL
    prometheus.reset_client()


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_cluster_page_renders_with_a_metrics_unavailable_panel(
    alice: User, prometheus_down: str
) -> None:
    # Given Prometheus is down; When Alice opens the cluster overview
    response = logged_in(alice).get("/monitoring/")
    # Then the page renders and says why there are no charts
    assert response.status_code == 200
    html = response.content.decode()
    assert f"metrics unavailable: cannot connect to Prometheus at {prometheus_down}" in html
    assert 'role="alert"' in html
    assert "GPU cluster" in html


def test_team_page_still_shows_quota_and_job_hours_without_prometheus(
    bob: User, demo: dict[str, Any], prometheus_down: str
) -> None:
    # Given a job that held 2 GPUs for the last 3 hours, and Prometheus down
    now = timezone.now()
    JobFactory(
        team=demo["teams"]["vision"],
        owner=bob,
        state=JobState.RUNNING,
        gpu_count=2,
        started_at=now - timedelta(hours=3),
    )
    # When Bob opens his team's page
    response = logged_in(bob).get("/monitoring/teams/vision/?range=24h")
    # Then it renders with the panel, and the job records' part is still there
    assert response.status_code == 200
    html = response.content.decode()
    assert "metrics unavailable: cannot connect to Prometheus" in html
    assert "fig-team-usage" in html
    assert "nvidia.com/gpu" in html


def test_job_gpu_partial_says_metrics_unavailable(alice: User, prometheus_down: str) -> None:
    job = JobFactory(
        team=alice.teams.get(slug="vision"),
        owner=alice,
        state=JobState.RUNNING,
        started_at=timezone.now() - timedelta(minutes=10),
    )
    response = logged_in(alice).get(f"/monitoring/jobs/{job.pk}/gpus/")
    assert response.status_code == 200
    assert "metrics unavailable: cannot connect to Prometheus" in response.content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/monitoring/idle/",
        "/api/v1/monitoring/teams/vision/usage/?range=24h",
    ],
)
def test_api_answers_503_with_the_reason(alice: User, prometheus_down: str, path: str) -> None:
    response = api_client_for(alice).get(path)
    assert response.status_code == 503
    assert response.json()["detail"].startswith(
        f"metrics unavailable: cannot connect to Prometheus at {prometheus_down}"
    )
