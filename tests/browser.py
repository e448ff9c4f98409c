"""Headless Chromium (Debian's) driven by Playwright, for the browser tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, sync_playwright

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
    violations: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        _watch_csp(browser, violations)
        yield browser
        browser.close()
        connections.close_all()
    # Blocked by the portal's own Content Security Policy: an inline handler or script
    # that silently does nothing (a confirmation never asked, say).
    assert not violations, "Content Security Policy violations:\n" + "\n".join(
        dict.fromkeys(violations)
    )


def _watch_csp(browser: Browser, violations: list[str]) -> None:
    """Collect the CSP violations the console reports on every page of ``browser``."""

    def watch(page: Page) -> None:
        def on_console(message: ConsoleMessage) -> None:
            if "Content Security Policy" in message.text:
                violations.append(f"{page.url}: {message.text}")

        page.on("console", on_console)

    new_context, new_page = browser.new_context, browser.new_page

    def watched_context(*args: Any, **kwargs: Any) -> BrowserContext:
        context = new_context(*args, **kwargs)
        context.on("page", watch)
        return context

    def watched_page(*args: Any, **kwargs: Any) -> Page:
        page = new_page(*args, **kwargs)
        watch(page)
        return page

    browser.new_context = watched_context  # type: ignore[method-assign]
    browser.new_page = watched_page  # type: ignore[method-assign]
