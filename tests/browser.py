"""Headless Chromium (Debian's) driven by Playwright, for the browser tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connections
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    """A headless Chromium, closed on the way out.

    Missing tools fail the test (make test installs them): a skipped browser check proves
    nothing. Playwright's sync API runs an event loop in this thread, around the test's own
    ORM calls (synchronous and safe: allowed for the test only, never in a deployment).
    Those calls get connections of their own while the loop runs; they are closed here, or
    the test database could not be dropped at the end.
    """
    assert shutil.which(CHROMIUM) or Path(CHROMIUM).exists(), f"{CHROMIUM} is missing"
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
        connections.close_all()
