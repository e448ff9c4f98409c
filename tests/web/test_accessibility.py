"""Every page, in Chromium at desktop (1,400 px) and phone (390 px) width: axe-core's WCAG 2
A and AA rules report nothing, nothing is cut off or overflows the screen sideways, no page
logs a console error or loads a resource that fails, and a screenshot of each goes to
``artifacts/pages/``.

The pages hold every variant they can render, so a colour added later is checked too: a job
in every state, every state and badge style the stylesheets define (the test fails when one
is shown nowhere), the cluster page without a cluster (its "unavailable" panels) and with a
sandbox cluster's GPU nodes (the capacity table), and the admin as a platform admin.

axe-core comes from npm (``make test`` installs it into ``var/axe``); the pages are served by
a live server with the demo data. Prometheus is not configured.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Browser, Page

from cluster import kube
from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from jobs.services.templates import template_from_job
from monitoring.models import GpuUsageDay
from tests.browser import chromium
from tests.conftest import training_spec
from tests.sandbox_process import SandboxProcess

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
AXE = REPO / "var" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
ARTIFACTS = REPO / "artifacts" / "pages"
WIDTHS = {"desktop": 1400, "phone": 390}
STYLESHEETS = REPO / "static" / "css"


def styled_variants() -> set[str]:
    """Every state and badge style the stylesheets define (``.state-failed``,
    ``.badge-borrowing``...): each must be on some page the test visits."""
    found = set()
    for sheet in STYLESHEETS.glob("*.css"):
        found |= set(re.findall(r"\.((?:state|badge)-[a-z0-9-]+)", sheet.read_text()))
    return found - {"state-line"}


@pytest.fixture
def sandbox(local_cluster: SandboxProcess) -> SandboxProcess:
    return local_cluster


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
    # A job in every other state, each with the words its state comes with
    for name, state, reason, message in (
        ("bert-pending", JobState.PENDING, "Unschedulable", "0/4 nodes are available."),
        ("gpt-succeeded", JobState.SUCCEEDED, "Completed", "Job completed."),
        ("flaky-failed", JobState.FAILED, "BackoffLimitExceeded", "Job has reached the limit."),
        ("sweep-cancelled", JobState.CANCELLED, "Cancelled", "Cancelled by alice."),
    ):
        job = job_submit(user=alice, data=training_spec(name=name, gpu={"count": 1}))
        Job.objects.filter(pk=job.pk).update(
            state=state, reason=reason, message=message, started_at=timezone.now()
        )
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
        "workspaces": "/workspaces/",
        "notifications": "/settings/notifications/",
        "tokens": "/settings/tokens/",
        "reports": "/monitoring/reports/",
    }


def log_in(page: Page, base: str, username: str = "alice") -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "demo")
    page.click("button[type=submit]")
    page.wait_for_url("**/jobs/")


def watch_for_errors(page: Page) -> list[str]:
    """Console errors, uncaught exceptions and resources that failed to load, as they come."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    # A load the browser itself abandoned (net::ERR_ABORTED: the page moved on before the
    # favicon came) is no failure of the portal's; an error answer is caught below.
    page.on(
        "requestfailed",
        lambda r: (
            None
            if r.failure == "net::ERR_ABORTED"
            else errors.append(f"failed: {r.url} {r.failure}")
        ),
    )
    page.on(
        "response",
        lambda r: errors.append(f"{r.status}: {r.url}") if r.status >= 400 else None,
    )
    return errors


def classes_on(page: Page) -> set[str]:
    return set(
        page.evaluate(
            "() => [...document.querySelectorAll('[class]')].flatMap(e => [...e.classList])"
        )
    )


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


def visit(page: Page, url: str, shot: str) -> list[str]:
    """Open a page; what axe and the overflow check find on it."""
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)
    return axe_violations(page) + overflow(page)


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_passes_axe_and_fits_the_screen(
    browser: Browser, site: dict[str, Any], sandbox: SandboxProcess, settings: Any, width: str
) -> None:
    assert AXE.exists(), "make test installs axe-core (npm) into var/axe"
    # bypass_csp: the pages' Content-Security-Policy would (rightly) refuse the injected axe
    context = browser.new_context(viewport={"width": WIDTHS[width], "height": 900}, bypass_csp=True)
    page = context.new_page()
    errors = watch_for_errors(page)
    problems: dict[str, list[str]] = {}
    seen: set[str] = set()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        # The log-in page, before logging in
        found = visit(page, f"{site['base']}/login/", f"login-{WIDTHS[width]}")
        if found:
            problems["login"] = found
        log_in(page, site["base"])
        for name, path in pages(site).items():
            found = visit(page, f"{site['base']}{path}", f"{name}-{WIDTHS[width]}")
            seen |= classes_on(page)
            if found:
                problems[name] = found
        # The cluster page again, with a cluster: its GPU nodes, the capacity table
        settings.KUBECONFIG, settings.KUBE_CONTEXT = str(sandbox.kubeconfig), ""
        kube.reset_client()
        found = visit(page, f"{site['base']}/monitoring/", f"cluster-nodes-{WIDTHS[width]}")
        assert page.locator("table.capacity").count() == 1
        if found:
            problems["cluster-with-nodes"] = found
    finally:
        kube.reset_client()
        context.close()
    assert problems == {}, "\n".join(f"{k}: {v}" for k, v in problems.items())
    # Every state and badge style was on a page, so axe checked its colours
    assert styled_variants() - seen == set()
    assert {"state-succeeded", "state-pending", "badge-borrowing"} <= styled_variants()
    # And no page logged an error or failed to load something
    assert errors == []


def test_the_admin_logs_no_error(browser: Browser, site: dict[str, Any]) -> None:
    # Given the platform admin in the admin console
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors = watch_for_errors(page)
    try:
        log_in(page, site["base"], "admin")
        # When they open its index and the job and team lists
        for path in ("/admin/", "/admin/jobs/job/", "/admin/teams/team/"):
            page.goto(f"{site['base']}{path}")
            page.wait_for_load_state("networkidle")
            assert page.locator("#site-name").count() == 1, path
    finally:
        context.close()
    # Then no page logged an error or failed to load anything (its icon included)
    assert errors == []
