"""A real Prometheus scrapes the portal's own /metrics with the generated config."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import User

from jobs.services.submit import job_submit
from tests.conftest import training_spec
from tests.monitoring.conftest import instant
from tests.monitoring.prometheus_process import start_prometheus
from tests.worker_process import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_prometheus_scrapes_the_portals_job_metrics(
    live_server: Any, alice: User, tmp_path: Path
) -> None:
    # Given two queued jobs of team vision
    for name in ("scraped-1", "scraped-2"):
        job_submit(user=alice, data=training_spec(name=name))
    portal = urlparse(live_server.url).netloc

    # When Prometheus scrapes the portal with the shipped scrape config
    prom = start_prometheus(tmp_path / "prom", dcgm_targets=[], portal_targets=[portal])
    try:
        wait_for(lambda: instant(prom, 'up{job="gpu-portal"} == 1'), timeout=30)
        series = wait_for(
            lambda: instant(prom, 'gpu_portal_jobs{team="vision",state="queued"}'), timeout=30
        )
    finally:
        prom.stop()

    # Then the portal's own numbers are in Prometheus, by team and state
    assert float(series[0]["value"][1]) == 2
