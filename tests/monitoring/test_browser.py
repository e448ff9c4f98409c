"""A real browser (headless Chromium driven by Playwright) draws the cluster and job GPU
charts against a live server, with no JavaScript errors. Screenshots land in artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.browser import chromium
from tests.monitoring.conftest import submit_running
from tests.monitoring.prometheus_process import PrometheusProcess
from tests.worker_process import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"


@pytest.fixture
def browser_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[str]]]:
    """A page, and the JavaScript errors it reports (uncaught exceptions, console errors)."""
    errors: list[str] = []
    with chromium(monkeypatch) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None,
        )
        yield page, errors


def login(page: Any, live_server: Any, user: User) -> None:
    client = Client()
    client.force_login(user)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )


def test_cluster_and_job_pages_draw_their_charts_without_js_errors(
    users: dict[str, User],
    worker: WorkerProcess,
    metrics: PrometheusProcess,
    live_server: Any,
    browser_page: tuple[Any, list[str]],
) -> None:
    # Given a running job on the sandbox, scraped by Prometheus, and Alice in a browser
    job = submit_running(users["alice"], name="drawn", env={}, gpus=2)
    page, errors = browser_page
    login(page, live_server, users["alice"])
    ARTIFACTS.mkdir(exist_ok=True)

    # When she opens the cluster overview
    # (Waits use locators only: the page's CSP forbids the eval a wait_for_function needs.)
    page.goto(f"{live_server.url}/monitoring/?range=15m")
    page.locator(".js-plotly-plot").nth(3).wait_for(timeout=20_000)
    page.screenshot(path=str(ARTIFACTS / "monitoring-cluster.png"), full_page=True)
    # Then every figure on it is drawn (capacity, two heatmaps, utilisation over time)
    assert page.locator(".js-plotly-plot").count() == page.locator("[data-plotly-figure]").count()

    # When she opens the job's GPU charts (loaded by htmx into the placeholder)
    page.goto(f"{live_server.url}/monitoring/jobs/{job.pk}/")
    charts = page.locator("#job-gpus .js-plotly-plot")
    charts.nth(3).wait_for(timeout=20_000)
    page.screenshot(path=str(ARTIFACTS / "monitoring-job-gpus.png"), full_page=True)
    # Then the four charts are drawn with one line per GPU the job holds
    assert charts.count() == 4
    assert [charts.nth(i).locator("g.trace.scatter").count() for i in range(4)] == [2, 2, 2, 2]

    # And nothing went wrong in the page's JavaScript
    assert errors == []
