"""The whole flow in a real browser: headless Chromium (Debian's) driven by Playwright,
against the portal served by a live server, a real Celery worker, Redis, PostgreSQL and
the sandbox cluster. Screenshots of each step go to artifacts/e2e/.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect

from jobs.models import Job, JobState
from tests.browser import chromium
from tests.worker_process import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)


ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    with chromium(monkeypatch) as browser:
        yield browser


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.js_errors = errors  # type: ignore[attr-defined]
    yield page
    context.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def submit_form(page: Page, base: str, name: str, gpus: str, env: str) -> None:
    page.goto(f"{base}/jobs/new/")
    page.fill("#id_name", name)
    page.fill("#id_image", "nvcr.io/nvidia/pytorch:24.05-py3")
    page.fill("#id_command", "torchrun train.py")
    page.fill("#id_gpu_count", gpus)
    page.select_option("#id_gpu_product", "NVIDIA-A100-SXM4-80GB")
    page.fill("#id_env", env)


def test_researcher_flow_in_a_real_browser(
    live_server: Any, worker: WorkerProcess, page: Page
) -> None:
    call_command("seed_demo", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    base = live_server.url

    # Log in
    page.goto(f"{base}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "demo")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    shot(page, "01-jobs")

    # Fill a 2-GPU A100 training job; the YAML preview follows what is typed
    submit_form(page, base, "e2e-a100", "1", "SANDBOX_DURATION=90s")
    preview = page.locator("[data-testid=yaml-preview]")
    expect(preview).to_contain_text("nvidia.com/gpu: '1'")
    page.fill("#id_gpu_count", "2")
    expect(preview).to_contain_text("nvidia.com/gpu: '2'")
    expect(preview).to_contain_text("NVIDIA-A100-SXM4-80GB")
    expect(page.locator("[data-testid=fit-preview]")).to_contain_text("Fits now")
    shot(page, "02-form-preview")

    # Submit, then watch the state move on the job page without reloading
    page.click("button.primary[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    state = page.locator("[data-testid=job-state]")
    expect(state).to_have_text("running", timeout=45_000)
    shot(page, "03-running")
    expect(state).to_have_text("succeeded", timeout=60_000)
    shot(page, "04-succeeded")
    assert navigations == [], f"the page reloaded: {navigations}"
    job = Job.objects.get(name="e2e-a100")
    assert job.state == JobState.SUCCEEDED and job.gpu_count == 2

    # The team page charts the team's usage
    page.goto(f"{base}/monitoring/teams/vision/")
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=20_000)
    shot(page, "05-team-usage")

    # A second job, cancelled from its page
    submit_form(page, base, "e2e-cancel", "1", "SANDBOX_DURATION=1h")
    expect(page.locator("[data-testid=yaml-preview]")).to_be_visible()
    page.click("button.primary[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    expect(page.locator("[data-testid=job-state]")).to_have_text(
        re.compile("pending|running"), timeout=45_000
    )
    page.click("button.danger")
    expect(page.locator("[data-testid=job-state]")).to_have_text("cancelled", timeout=20_000)
    shot(page, "06-cancelled")
    assert Job.objects.get(name="e2e-cancel").state == JobState.CANCELLED

    assert page.js_errors == []  # type: ignore[attr-defined]
