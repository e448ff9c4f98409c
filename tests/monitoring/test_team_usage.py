"""A team's usage compares like with like: what its jobs held of each quota resource, each
against its own quota, never whole GPUs, MIG slices and shared GPUs summed together."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from jobs.models import JobState
from monitoring import charts, prometheus
from monitoring.selectors.team import team_usage_get
from tests.factories import JobFactory
from tests.monitoring.prometheus_process import free_port

GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"


@pytest.fixture
def no_prometheus(settings: Any) -> None:
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    settings.PROMETHEUS_TIMEOUT = 1.0
    prometheus.reset_client()


def test_each_quota_resource_has_its_own_held_line_and_quota(
    demo: dict[str, Any], bob: User, no_prometheus: None
) -> None:
    # Given vision (16 nvidia.com/gpu, 8 MIG 1g.10gb) running 14 whole GPUs and 3 MIG slices
    vision, now = demo["teams"]["vision"], timezone.now()
    for gpus, demand in ((14, {GPU: 14}), (3, {MIG: 3})):
        JobFactory(
            team=vision,
            owner=bob,
            state=JobState.RUNNING,
            gpu_count=gpus,
            demand=demand,
            started_at=now - timedelta(minutes=30),
        )

    # When the team's usage is read over the last hour
    usage = team_usage_get(team=vision, user=bob, range_key="1h", now=now)

    # Then each resource's line holds only its own jobs, and ends under its own quota
    assert usage.allocated_by_resource[GPU][-1] == 14
    assert usage.allocated_by_resource[MIG][-1] == 3
    assert usage.quota_limits[GPU] == 16 and usage.quota_limits[MIG] == 8
    # while the old sum (17 "GPUs") would read as over the 16-GPU quota
    assert usage.allocated_gpus[-1] == 17

    # And the chart draws each held line beside its own quota line, in its colour
    figure = charts.team_usage_figure(usage)
    lines = {trace["name"]: trace for trace in figure["data"]}
    assert "GPUs held" not in lines
    for resource in (GPU, MIG):
        held, quota = lines[f"held {resource}"], lines[f"quota {resource}"]
        assert held["line"]["color"] == quota["line"]["color"]
    assert lines[f"held {GPU}"]["y"][-1] == 14
