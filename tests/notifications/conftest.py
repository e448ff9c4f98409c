"""Real receivers, notification tasks run in the test process, and a job to notify about."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobs.tasks import job_notify_task
from notifications.tasks import delivery_send_task
from tests import receivers


@pytest.fixture
def smtp(settings: Any) -> Iterator[receivers.SmtpReceiver]:
    for server in receivers.smtp_receiver():
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = "127.0.0.1"
        settings.EMAIL_PORT = server.port
        settings.EMAIL_TIMEOUT = 5.0
        yield server


@pytest.fixture
def hooks() -> Iterator[receivers.WebhookReceiver]:
    yield from receivers.webhook_receiver()


@pytest.fixture
def eager(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notification tasks queued on commit run at once, in this process: the worker's
    code path (retries included, without their countdown), without the broker. The other
    tasks (admission, apply) are queued as usual and not run: these tests move jobs
    themselves."""
    settings.PORTAL_URL = "https://gpu.example.com"
    for task in (job_notify_task, delivery_send_task):
        monkeypatch.setattr(task, "delay", lambda *args, task=task: task.apply(args=args))
