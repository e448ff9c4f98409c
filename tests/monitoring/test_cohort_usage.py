"""The cohort page and the team page show, now and over time, each team's nominal quota,
use, borrowed and lent GPUs, and which jobs borrow."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from jobs.models import JobState
from monitoring import charts, prometheus
from monitoring.selectors.cohort import cohort_usage_get
from tests.factories import JobFactory
from tests.monitoring.prometheus_process import free_port

GPU = "nvidia.com/gpu"


@pytest.fixture
def no_prometheus(settings: Any) -> None:
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    settings.PROMETHEUS_TIMEOUT = 1.0
    prometheus.reset_client()


@pytest.fixture
def borrowing(research: dict[str, Any]) -> dict[str, Any]:
    """vision has run its own 16 GPUs for 40 minutes, and 4 of robotics' for the last 20."""
    vision, alice, now = research["teams"]["vision"], research["users"]["alice"], timezone.now()
    jobs = [
        JobFactory(
            team=vision,
            owner=alice,
            name=name,
            state=JobState.RUNNING,
            gpu_count=gpus,
            demand={GPU: gpus},
            admitted_at=now - timedelta(minutes=minutes),
            started_at=now - timedelta(minutes=minutes),
            borrowing=borrowed,
        )
        for name, gpus, minutes, borrowed in (("own", 16, 40, False), ("extra", 4, 20, True))
    ]
    return {**research, "now": now, "jobs": jobs}


def test_the_cohort_over_time_shows_own_borrowed_and_lent_per_team(
    borrowing: dict[str, Any],
) -> None:
    alice = borrowing["users"]["alice"]
    usage = cohort_usage_get(user=alice, slug="research", range_key="1h", now=borrowing["now"])

    gpu = next(s for s in usage.resources if s.resource == GPU)
    assert gpu.nominal == {"robotics": 8, "vision": 16}
    # an hour ago nothing ran; now vision holds its 16 and borrows 4 that robotics lends
    assert (gpu.own["vision"][0], gpu.borrowed["vision"][0], gpu.lent["robotics"][0]) == (0, 0, 0)
    assert (gpu.own["vision"][-1], gpu.borrowed["vision"][-1]) == (16, 4)
    assert (gpu.lent["robotics"][-1], gpu.lent["vision"][-1]) == (4, 0)
    # halfway (30 minutes ago), vision ran only its own quota
    middle = len(usage.timestamps) // 2
    assert (gpu.own["vision"][middle], gpu.borrowed["vision"][middle]) == (16, 0)
    assert [j.name for j in usage.borrowing_jobs] == ["extra"]

    # and the chart stacks own and borrowed use, with lent beside it
    figure = charts.cohort_figures(usage)[f"cohort-{usage.resources.index(gpu)}"]
    traces = {t["name"]: t for t in figure["data"]}
    assert traces["vision: own quota"]["stackgroup"] == traces["vision: borrowed"]["stackgroup"]
    assert traces["robotics: lent"]["y"][-1] == 4
    assert traces["the teams' nominal quota"]["y"] == [24, 24]


def test_the_cohort_page_lists_teams_totals_and_borrowing_jobs(
    borrowing: dict[str, Any], client: Client
) -> None:
    client.force_login(borrowing["users"]["dave"])
    page = client.get("/monitoring/cohorts/research/?range=1h")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Cohort Research" in html
    assert "Jobs running on borrowed quota" in html and ">extra</a>" in html
    assert "<td><code>nvidia.com/gpu</code></td><td>24</td><td>20</td><td>4</td><td>4</td>" in html


def test_another_teams_cohort_page_is_not_found(borrowing: dict[str, Any], client: Client) -> None:
    carol: User = borrowing["users"]["carol"]
    client.force_login(carol)
    assert client.get("/monitoring/cohorts/research/").status_code == 404


def test_the_team_page_shows_what_the_team_borrows_and_its_borrowing_jobs(
    borrowing: dict[str, Any], client: Client, no_prometheus: None
) -> None:
    client.force_login(borrowing["users"]["alice"])
    html = client.get("/monitoring/teams/vision/?range=1h").content.decode()
    assert "Borrowed and lent" in html
    assert 'href="/monitoring/cohorts/research/"' in html
    assert "<th>Borrowed</th><th>Lent</th>" in html
    assert f'href="/jobs/{borrowing["jobs"][1].pk}/">extra #' in html
    assert 'id="fig-team-sharing-' in html
