"""A workspace in a real browser: alice creates one on the Workspaces page, opens JupyterLab
through the portal's proxy, runs a cell over the proxied kernel WebSocket, writes a file in
her home folder, stops and starts the workspace, finds the file again, and deletes the
workspace with its home folder once she has said yes (her first "no" keeps both).

Real processes: headless Chromium (Playwright), the portal (live server) behind the
workspace proxy (uvicorn), a Celery worker, the sandbox running a real JupyterLab.
Screenshots go to artifacts/e2e/.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Dialog, Page, expect

from cluster import kube
from jobs.manifests.naming import home_claim_name
from jobs.models import Job, JobState
from tests.browser import chromium
from tests.integration.test_e2e_browser import shot
from tests.proxy_process import ProxyProcess
from tests.worker_process import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    with chromium(monkeypatch) as browser:
        yield browser


@pytest.fixture
def proxy(worker: WorkerProcess, live_server: Any, tmp_path: Any) -> Iterator[ProxyProcess]:
    proc = ProxyProcess(tmp_path / "proxy", worker.env, upstream=live_server.url).start()
    yield proc
    proc.stop()


def run_cell(page: Page, code: str) -> None:
    """Type ``code`` into the notebook's last cell once its kernel is idle, and run it
    (Shift+Enter)."""
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").last
    editor.click()
    editor.press_sequentially(code)
    expect(editor).to_have_text(code)
    page.keyboard.press("Shift+Enter")


def workspace_state(page: Page, base: str, name: str, state: str) -> None:
    """Reload the Workspaces page until the workspace's state is ``state`` (its state cell:
    its message may say "running" while it is still pending, and the page then has no Open
    button yet)."""

    def shows() -> bool:
        page.goto(f"{base}/workspaces/")
        cell = page.locator(f"[data-testid=workspace-{name}] .state")
        return bool(cell.inner_text().strip() == state)

    wait_for(shows, timeout=120, interval=2)


def test_alice_opens_jupyterlab_through_the_portal_and_her_files_outlive_a_stop(
    proxy: ProxyProcess, browser: Browser
) -> None:
    call_command("seed_demo", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    call_command("cluster_sync", stdout=open(os.devnull, "w"))  # noqa: SIM115
    base = proxy.url
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()

    # Alice logs in (through the proxy, as make run serves the portal) and creates a
    # workspace on a shared T4 slice
    page.goto(f"{base}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "demo")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    page.goto(f"{base}/workspaces/")
    page.fill("#id_name", "lab")
    page.select_option("#id_workspace_image", "jupyter-pytorch")
    page.fill("#id_gpu_count", "1")
    page.select_option("#id_gpu_sharing", "shared")
    page.select_option("#id_gpu_product", "Tesla-T4")
    page.fill("#id_cpu", "1")
    page.fill("#id_memory", "2Gi")
    page.click("#workspace-form button[type=submit]")
    workspace_state(page, base, "lab", "running")
    job = Job.objects.get(name="lab")
    shot(page, "21-workspace-running")

    # She opens it: JupyterLab, through the portal, under /workspaces/<id>/
    with context.expect_page() as opened:
        page.locator("[data-testid=workspace-lab] [data-testid=open]").click()
    lab = opened.value
    expect(lab).to_have_url(re.compile(rf"/workspaces/{job.pk}/lab"), timeout=30_000)
    lab.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=60_000)
    # A cell runs over the proxied kernel WebSocket
    run_cell(lab, "1 + 1")
    expect(lab.locator(".jp-OutputArea-output").last).to_have_text("2", timeout=60_000)
    # ...and writes a file in her home folder
    run_cell(lab, "open('kept.txt', 'w').write('still here')")
    expect(lab.locator(".jp-OutputArea-output").last).to_have_text("10", timeout=30_000)
    shot(lab, "22-jupyterlab-cell")
    lab.close()

    # She stops it (its GPU freed), then starts it again
    page.goto(f"{base}/workspaces/")
    page.locator("[data-testid=workspace-lab] [data-testid=stop]").click()
    workspace_state(page, base, "lab", "stopped")
    assert Job.objects.get(pk=job.pk).state == JobState.STOPPED
    page.locator("[data-testid=workspace-lab] [data-testid=start]").click()
    workspace_state(page, base, "lab", "running")

    # The file is still there, in JupyterLab's file browser and in a cell
    with context.expect_page() as reopened:
        page.locator("[data-testid=workspace-lab] [data-testid=open]").click()
    lab = reopened.value
    expect(lab.locator(".jp-DirListing-item", has_text="kept.txt")).to_be_visible(timeout=60_000)
    lab.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=60_000)
    run_cell(lab, "open('kept.txt').read()")
    expect(lab.locator(".jp-OutputArea-output").last).to_have_text("'still here'", timeout=60_000)
    shot(lab, "23-file-kept")
    lab.close()

    # She deletes it with its home folder, once she has said yes
    delete_after_a_no_then_a_yes(page, base, job)
    context.close()


def home_exists(job: Job) -> bool:
    try:
        kube.get("PersistentVolumeClaim", home_claim_name(job.owner.username), job.namespace)
    except kube.ObjectNotFound:
        return False
    return True


def delete_after_a_no_then_a_yes(page: Page, base: str, job: Job) -> None:
    """Delete the workspace with its home folder from the Workspaces page: the browser asks
    first; a "no" keeps both, a "yes" deletes both."""
    # The browser asks first, and her "no" keeps both
    page.goto(f"{base}/workspaces/")
    row = page.locator("[data-testid=workspace-lab]")
    row.locator("input[name=delete_home]").check()
    questions: list[str] = []
    answers = iter([False, True])

    def answer(dialog: Dialog) -> None:
        questions.append(dialog.message)
        if next(answers):
            dialog.accept()
        else:
            dialog.dismiss()

    page.on("dialog", answer)
    row.get_by_role("button", name="Delete").click()
    page.wait_for_timeout(2000)  # a form the dialog did not stop is posted by now
    assert questions == ["Delete workspace lab?"]
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert home_exists(job)
    # ...and her "yes" deletes the workspace and its home folder
    row.get_by_role("button", name="Delete").click()
    wait_for(lambda: Job.objects.get(pk=job.pk).reason == "Deleted", timeout=30)
    wait_for(lambda: not home_exists(job), timeout=120, interval=1)
    assert len(questions) == 2
