"""Every page, in Chromium at desktop (1,400 px) and phone (390 px) width: axe-core's WCAG 2
A and AA rules report nothing, nothing is cut off or overflows the screen sideways, and a
screenshot of each goes to ``artifacts/pages/``.

axe-core comes from npm (``make test`` installs it into ``var/axe``); the pages are served by
a live server with the demo data, a queued and a borrowing job. No cluster or Prometheus is
configured: the pages' "unavailable" panels are part of what is checked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Browser, Page

from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from jobs.services.templates import template_from_job
from monitoring.models import GpuUsageDay
from tests.browser import chromium
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
AXE = REPO / "var" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
ARTIFACTS = REPO / "artifacts" / "pages"
WIDTHS = {"desktop": 1400, "phone": 390}


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    with chromium(monkeypatch) as browser:
        yield browser


@pytest.fixture
def site(live_server: Any, settings: Any, tmp_path: Path) -> dict[str, Any]:
    settings.KUBECONFIG = str(tmp_path / "no-cluster")  # the pages say the cluster is away
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    settings.PROMETHEUS_TIMEOUT = 0.5
    call_command("seed_demo", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    from django.contrib.auth.models import User

    alice = User.objects.get(username="alice")
    queued = job_submit(user=alice, data=training_spec(name="resnet-queued", gpu={"count": 2}))
    running = job_submit(user=alice, data=training_spec(name="vit-borrowing", gpu={"count": 8}))
    Job.objects.filter(pk=running.pk).update(
        state=JobState.RUNNING,
        admitted_at=timezone.now(),
        applied_at=timezone.now(),
        started_at=timezone.now(),
        borrowing=True,
        reason="Running",
        message="1 of 1 worker running.",
    )
    template_from_job(user=alice, job=running, name="vit-8")
    GpuUsageDay.objects.create(
        day=timezone.localdate(),
        job=running,
        job_name=running.object_name,
        team=running.team,
        user=alice,
        product="NVIDIA-A100-SXM4-80GB",
        gpu_hours_allocated=8.0,
        gpu_hours_used=2.0,
        idle_gpu_hours=5.5,
        rolled_up_at=timezone.now(),
    )
    return {"base": live_server.url, "queued": queued, "running": running}


def pages(site: dict[str, Any]) -> dict[str, str]:
    job = site["running"].pk
    return {
        "job-list": "/jobs/",
        "job-page": f"/jobs/{job}/",
        "queued-job-page": f"/jobs/{site['queued'].pk}/",
        "submit-form": "/jobs/new/",
        "teams": "/teams/",
        "cluster": "/monitoring/",
        "team": "/monitoring/teams/vision/",
        "cohort": "/monitoring/cohorts/research/",
        "job-gpus": f"/monitoring/jobs/{job}/",
        "templates": "/jobs/templates/",
        "notifications": "/settings/notifications/",
        "tokens": "/settings/tokens/",
        "reports": "/monitoring/reports/",
    }


def log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "demo")
    page.click("button[type=submit]")
    page.wait_for_url("**/jobs/")


def axe_violations(page: Page) -> list[str]:
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        """async () => {
            const result = await axe.run(document, {
                runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
            });
            return result.violations.map(v => {
                const where = v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(" | ");
                return `${v.id} (${v.impact}): ${where}`;
            });
        }"""
    )
    return list(found)


def overflow(page: Page) -> list[str]:
    """What sticks out of the viewport sideways (the page itself, or elements in it)."""
    return list(
        page.evaluate(
            """() => {
                const width = document.documentElement.clientWidth;
                const out = [];
                if (document.documentElement.scrollWidth > width + 1) {
                    out.push(`page is ${document.documentElement.scrollWidth}px wide`);
                }
                for (const el of document.querySelectorAll("header a, header button, nav a")) {
                    const box = el.getBoundingClientRect();
                    if (box.width && (box.right > width + 1 || box.left < -1)) {
                        const [l, r] = [Math.round(box.left), Math.round(box.right)];
                        out.push(`${el.textContent.trim()} at ${l}-${r}px`);
                    }
                }
                return out;
            }"""
        )
    )


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_passes_axe_and_fits_the_screen(
    browser: Browser, site: dict[str, Any], width: str
) -> None:
    assert AXE.exists(), "make test installs axe-core (npm) into var/axe"
    # bypass_csp: the pages' Content-Security-Policy would (rightly) refuse the injected axe
    context = browser.new_context(viewport={"width": WIDTHS[width], "height": 900}, bypass_csp=True)
    page = context.new_page()
    problems: dict[str, list[str]] = {}
    try:
        # The log-in page, before logging in
        page.goto(f"{site['base']}/login/")
        found = axe_violations(page) + overflow(page)
        if found:
            problems["login"] = found
        log_in(page, site["base"])
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for name, path in pages(site).items():
            page.goto(f"{site['base']}{path}")
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(ARTIFACTS / f"{name}-{WIDTHS[width]}.png"), full_page=True)
            found = axe_violations(page) + overflow(page)
            if found:
                problems[name] = found
    finally:
        context.close()
    assert problems == {}, "\n".join(f"{k}: {v}" for k, v in problems.items())
