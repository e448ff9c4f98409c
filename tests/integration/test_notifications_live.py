"""Notices from a real worker: a job fails on the sandbox cluster, the worker's tracking
sees it, and its owner gets an email, through a real SMTP server in this process, that
ends with the last lines of the failed pod's log. With the SMTP server dead, tracking goes
on exactly the same. A worker killed while it sends a notice loses nothing: the sweep sends
it again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from jobs.models import JobState
from jobs.services.submit import job_cancel, job_submit
from notifications.models import Delivery
from notifications.services import deliveries_stuck_release
from teams.models import Team
from teams.services import team_save
from tests.conftest import api_client_for, training_spec
from tests.receivers import (
    SmtpReceiver,
    WebhookReceiver,
    free_port,
    smtp_receiver,
    webhook_receiver,
)
from tests.worker_process import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CRASH = {"SANDBOX_DURATION": "30s", "SANDBOX_EXIT_CODE": "3"}


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    yield from smtp_receiver()


@pytest.fixture
def hooks() -> Iterator[WebhookReceiver]:
    yield from webhook_receiver()


def seed() -> dict[str, User]:
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    vision = Team.objects.get(slug="vision")
    vision.cohort = None
    team_save(actor=None, team=vision)
    return {u.username: u for u in User.objects.all()}


def start_worker(worker_env: dict[str, str], tmp_path: Path, smtp_port: int) -> WorkerProcess:
    env = {
        **worker_env,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_port),
        "EMAIL_TIMEOUT": "3",
        "PORTAL_URL": "https://gpu.example.com",
    }
    return WorkerProcess(tmp_path / "worker", env).start()


def test_a_job_that_fails_on_the_cluster_emails_its_log_tail(
    worker_env: dict[str, str], tmp_path: Path, smtp: SmtpReceiver
) -> None:
    users = seed()
    worker = start_worker(worker_env, tmp_path, smtp.port)
    try:
        job = job_submit(
            user=users["alice"], data=training_spec(name="crash", env=CRASH, retries=0)
        )

        mail = wait_for(lambda: smtp.messages and smtp.messages[0], timeout=60)
    finally:
        worker.stop()

    assert mail["To"] == "alice@example.com"
    assert mail["Subject"] == f"[GPU Portal] vision/crash #{job.pk} failed (exit code 3)"
    body = mail.get_content()
    assert "Last " in body and f"lines of crash-{job.pk}" in body
    assert (
        "RuntimeError: CUDA error: an illegal memory access was encountered (exit code 3)" in body
    )
    assert f"https://gpu.example.com/jobs/{job.pk}/" in body
    assert len(smtp.messages) == 1


def test_a_dead_smtp_server_does_not_hold_up_tracking(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    users = seed()
    worker = start_worker(worker_env, tmp_path, free_port())  # nothing listens there
    try:
        job = job_submit(
            user=users["alice"], data=training_spec(name="crash", env=CRASH, retries=0)
        )

        failed = wait_for(
            lambda: (j := type(job).objects.get(pk=job.pk)).state == JobState.FAILED and j,
            timeout=60,
        )
        delivery = wait_for(
            lambda: Delivery.objects.filter(last_error__contains="unreachable").first(), timeout=30
        )
    finally:
        worker.stop()

    assert failed.exit_code == 3 and failed.reason == "BackoffLimitExceeded"
    assert delivery.status in ("retrying", "failed")
    assert delivery.payload["job"]["id"] == job.pk


def test_a_notice_whose_worker_dies_mid_send_is_sent_again(
    worker_env: dict[str, str], tmp_path: Path, smtp: SmtpReceiver, hooks: WebhookReceiver
) -> None:
    # Given alice's webhook for cancelled jobs, whose receiver holds the first post open
    users = seed()
    hooks.stall = 1
    response = api_client_for(users["alice"]).put(
        "/api/v1/notifications/",
        {"channels": [{"channel": "webhook", "target": hooks.url(), "events": ["job.cancelled"]}]},
        format="json",
    )
    assert response.status_code == 200, response.json()
    job = job_submit(user=users["alice"], data=training_spec(name="doomed"))
    worker = start_worker(worker_env, tmp_path, smtp.port)
    try:
        # When the worker is killed while it posts the notice of the job's cancel
        job_cancel(user=users["alice"], job_id=job.pk)
        wait_for(lambda: len(hooks.requests) == 1, timeout=30)
        worker.kill()
        hooks.release.set()
        delivery = Delivery.objects.get(event="job.cancelled", payload__job__id=job.pk)
        # (the delivery is claimed by a run that is gone: nothing else would send it)
        assert (delivery.status, delivery.attempts) == ("sending", 1)
        # And the sweep runs once its claim is older than NOTIFY_SENDING_TIMEOUT_SECONDS
        assert deliveries_stuck_release(now=delivery.claimed_at) == []  # too young to release
        later = timezone.now() + timedelta(minutes=10)
        assert deliveries_stuck_release(now=later) == [delivery.pk]
        assert deliveries_stuck_release(now=later) == []  # once per claim
        # And a worker is back (started only now: one that claimed the released delivery
        # between the two sweeps above would hold a new claim, which the second sweep,
        # ten minutes "later", would rightly find stale too)
        worker = start_worker(worker_env, tmp_path, smtp.port)

        # Then the new worker sends it: the receiver has it, twice, under one delivery id
        sent = wait_for(
            lambda: (d := Delivery.objects.get(pk=delivery.pk)).status == "sent" and d,
            timeout=30,
        )
    finally:
        worker.stop()
    assert sent.attempts == 2
    assert [r.headers["X-GPU-Portal-Delivery"] for r in hooks.requests] == [str(delivery.pk)] * 2
    assert hooks.requests[0].body == hooks.requests[1].body
