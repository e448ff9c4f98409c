"""A real Prometheus scraping a real sandbox's DCGM exporter (and the portal's jobs run by
a real Celery worker) for the monitoring tests."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from monitoring import prometheus
from tests.conftest import training_spec
from tests.integration.conftest import (  # noqa: F401
    cluster,
    module_worker,
    sandbox,
    worker,
    worker_env,
    worker_overrides,
)
from tests.monitoring.prometheus_process import PrometheusProcess, start_prometheus
from tests.sandbox_process import SandboxProcess
from tests.worker_process import WorkerProcess, wait_for

# Alert rules as shipped, but firing after 2 s instead of minutes.
TEST_RULES_FOR = "2s"


def instant(prom: PrometheusProcess, promql: str) -> list[dict[str, Any]]:
    url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        return list(json.load(resp)["data"]["result"])


@pytest.fixture(scope="module")
def prometheus_server(
    sandbox: SandboxProcess,  # noqa: F811 - the fixture imported above
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrometheusProcess]:
    """Prometheus scraping the sandbox every second, with the shipped rules (short ``for:``)."""
    prom = start_prometheus(
        tmp_path_factory.mktemp("prometheus"),
        dcgm_targets=[f"127.0.0.1:{sandbox.metrics_port}"],
        rules_for=TEST_RULES_FOR,
    )
    try:
        # Service discovery hands targets over after ~5 s: wait for the first scrape.
        wait_for(lambda: instant(prom, 'up{job="dcgm-exporter"} == 1'), timeout=20)
    except AssertionError:
        prom.stop()
        raise
    yield prom
    prom.stop()


def portal_pointed_at(prom: PrometheusProcess, settings: Any) -> Iterator[PrometheusProcess]:
    """Point the portal's Prometheus adapter at ``prom`` for one test (a fixture's body)."""
    settings.PROMETHEUS_URL = prom.url
    settings.PROMETHEUS_TIMEOUT = 5.0
    prometheus.reset_client()
    yield prom
    prometheus.reset_client()


@pytest.fixture
def metrics(prometheus_server: PrometheusProcess, settings: Any) -> Iterator[PrometheusProcess]:
    """Point the portal's Prometheus adapter at the test Prometheus."""
    yield from portal_pointed_at(prometheus_server, settings)


@pytest.fixture
def users(worker: WorkerProcess) -> dict[str, User]:  # noqa: F811
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    return {u.username: u for u in User.objects.all()}


def submit_running(user: User, *, name: str, env: dict[str, str], gpus: int = 1) -> Job:
    """Submit a long training job through the real worker and wait until it runs."""
    job = job_submit(
        user=user,
        data=training_spec(
            name=name,
            env={"SANDBOX_DURATION": "1h", **env},
            gpu={"count": gpus, "product": "NVIDIA-A100-SXM4-80GB"},
        ),
    )
    return wait_for(
        lambda: (
            (j := Job.objects.get(pk=job.pk)).state == JobState.RUNNING
            and j.placement.get("pods")
            and j
        ),
        timeout=40,
    )
