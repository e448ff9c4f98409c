"""Notices reach people through real receivers: an SMTP server and an HTTP server in this
process. Each test drives a job through the portal's own transition path; the tasks queued
on commit run in this process (the worker's code, without the broker)."""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import Job, JobState
from jobs.services.admission import admission_run
from jobs.services.notices import jobs_waiting_check
from jobs.services.submit import job_cancel, job_submit
from jobs.services.transitions import job_transition
from jobs.tasks import job_notify_task
from notifications.models import Delivery
from notifications.tasks import delivery_send_task
from tests.conftest import api_client_for, training_spec
from tests.receivers import SmtpReceiver, WebhookReceiver, free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def fail(job: Job, exit_code: int = 3) -> None:
    """The move the tracker makes when the cluster says the job failed."""
    job_transition(
        job=job,
        where={"state": job.state},
        changes={
            "state": JobState.FAILED,
            "reason": "BackoffLimitExceeded",
            "message": f"worker-0 exited with code {exit_code}.",
            "exit_code": exit_code,
            "finished_at": timezone.now(),
        },
        event_reason="BackoffLimitExceeded",
        event_message=f"queued → failed: worker-0 exited with code {exit_code}.",
        event_type="Warning",
    )


def start(job: Job) -> None:
    job_transition(
        job=job,
        where={"state": job.state},
        changes={"state": JobState.RUNNING, "reason": "Running", "started_at": timezone.now()},
        event_reason="Running",
        event_message="pending → running: 1 of 1 worker running.",
    )


def subscribe(user: User, *channels: dict[str, Any]) -> dict[str, Any]:
    response = api_client_for(user).put(
        "/api/v1/notifications/", {"channels": list(channels)}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()


def test_a_failed_job_emails_its_owner_once_with_what_a_person_needs(
    alice: User, smtp: SmtpReceiver
) -> None:
    # Given alice's default settings (email on failures) and a job of hers
    job = job_submit(user=alice, data=training_spec(name="crash"))

    # When it fails with exit code 3
    fail(job)

    # Then one email reaches her, saying what failed, how, and where to look
    assert len(smtp.messages) == 1
    mail = smtp.messages[0]
    assert mail["To"] == "alice@example.com"
    assert mail["Subject"] == f"[GPU Portal] vision/crash #{job.pk} failed (exit code 3)"
    body = mail.get_content()
    assert "worker-0 exited with code 3." in body
    assert "Exit code: 3" in body
    assert f"Open the job: https://gpu.example.com/jobs/{job.pk}/" in body
    # and running the notice's tasks again (a redelivered message) sends nothing more
    delivery = Delivery.objects.get()
    entry = job.events.get(reason="BackoffLimitExceeded")
    assert job_notify_task.apply(args=[job.pk, "job.failed", entry.pk]).get() == []
    assert delivery_send_task.apply(args=[delivery.pk]).get() == "sent"
    assert len(smtp.messages) == 1
    assert Delivery.objects.get().attempts == 1


def test_events_a_user_did_not_choose_send_nothing(alice: User, smtp: SmtpReceiver) -> None:
    job = job_submit(user=alice, data=training_spec(name="quiet"))

    start(job)  # "started running" is off by default

    assert smtp.messages == []
    assert not Delivery.objects.exists()


def test_a_webhook_is_signed_with_the_users_secret(
    alice: User, hooks: WebhookReceiver, smtp: SmtpReceiver
) -> None:
    settings = subscribe(
        alice, {"channel": "webhook", "target": hooks.url(), "events": ["job.running"]}
    )
    secret = next(c["secret"] for c in settings["channels"] if c["channel"] == "webhook")
    assert len(secret) == 64
    job = job_submit(user=alice, data=training_spec(name="signed"))

    start(job)

    assert len(hooks.requests) == 1
    request = hooks.requests[0]
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["x-gpu-portal-event"] == "job.running"
    timestamp = headers["x-gpu-portal-timestamp"]
    assert abs(int(timestamp) - timezone.now().timestamp()) < 60
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + request.body, hashlib.sha256)
    assert headers["x-gpu-portal-signature"] == f"sha256={expected.hexdigest()}"
    tampered = hmac.new(secret.encode(), f"{timestamp}.".encode() + request.body + b" ", "sha256")
    assert headers["x-gpu-portal-signature"] != f"sha256={tampered.hexdigest()}"
    # And after the secret is rotated, the next delivery is signed with the new one only
    rotated = subscribe(
        alice, {"channel": "webhook", "events": ["job.cancelled"], "rotate_secret": True}
    )
    new_secret = next(c["secret"] for c in rotated["channels"] if c["channel"] == "webhook")
    assert new_secret != secret
    job_cancel(user=alice, job_id=job.pk)
    later = hooks.requests[1]
    signed = f"{later.headers['X-GPU-Portal-Timestamp']}.".encode() + later.body
    for key, matches in ((new_secret, True), (secret, False)):
        mac = hmac.new(key.encode(), signed, hashlib.sha256).hexdigest()
        assert (later.headers["X-GPU-Portal-Signature"] == f"sha256={mac}") is matches
    payload = request.json()
    assert payload["event"] == "job.running"
    assert payload["job"]["id"] == job.pk and payload["job"]["state"] == "running"
    assert payload["job"]["url"] == f"https://gpu.example.com/jobs/{job.pk}/"
    assert payload["summary"] == "pending → running: 1 of 1 worker running."


def test_a_team_lead_sets_a_slack_channel_for_the_teams_jobs(
    alice: User, bob: User, hooks: WebhookReceiver, smtp: SmtpReceiver
) -> None:
    team_settings = {
        "channels": [
            {"channel": "slack", "target": hooks.url("/slack"), "events": ["job.cancelled"]}
        ]
    }
    assert (
        api_client_for(alice)
        .put("/api/v1/teams/vision/notifications/", team_settings, format="json")
        .status_code
        == 403
    )
    response = api_client_for(bob).put(
        "/api/v1/teams/vision/notifications/", team_settings, format="json"
    )
    assert response.status_code == 200, response.json()
    job = job_submit(user=alice, data=training_spec(name="team-job"))

    job_cancel(user=alice, job_id=job.pk)

    assert [r.path for r in hooks.requests] == ["/slack"]
    message = hooks.requests[0].json()
    assert message["text"] == f"[GPU Portal] vision/team-job #{job.pk} was cancelled"
    texts = " ".join(b["text"]["text"] for b in message["blocks"] if "text" in b)
    assert "Cancelled by alice." in texts
    assert f"<https://gpu.example.com/jobs/{job.pk}/|Open the job>" in str(message["blocks"])


def test_temporary_errors_are_retried_and_permanent_ones_are_not(
    alice: User, hooks: WebhookReceiver, smtp: SmtpReceiver
) -> None:
    subscribe(alice, {"channel": "webhook", "target": hooks.url(), "events": ["job.running"]})
    busy = job_submit(user=alice, data=training_spec(name="busy"))
    refused = job_submit(user=alice, data=training_spec(name="refused"))

    hooks.statuses[:] = [503, 200]  # busy, then fine
    start(busy)
    hooks.statuses[:] = [400]  # the receiver refuses this body: trying again cannot help
    start(refused)

    sent = Delivery.objects.get(payload__job__id=busy.pk)
    assert (sent.status, sent.attempts) == ("sent", 2)
    failed = Delivery.objects.get(payload__job__id=refused.pk)
    assert (failed.status, failed.attempts) == ("failed", 1)
    assert "answered 400" in failed.last_error
    assert len(hooks.requests) == 3


def test_a_dead_smtp_server_changes_nothing_in_job_tracking(alice: User, settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens
    job = job_submit(user=alice, data=training_spec(name="no-mail"))

    fail(job)

    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.exit_code == 3
    assert job.events.filter(reason="BackoffLimitExceeded").exists()
    delivery = Delivery.objects.get()
    assert delivery.status == "failed"
    assert delivery.attempts == 8  # retried with backoff, then given up
    assert "unreachable" in delivery.last_error


def test_failures_show_on_the_settings_page_and_in_metrics(
    alice: User, hooks: WebhookReceiver, smtp: SmtpReceiver
) -> None:
    subscribe(alice, {"channel": "webhook", "target": hooks.url(), "events": ["job.running"]})
    hooks.statuses[:] = [410]
    start(job_submit(user=alice, data=training_spec(name="gone")))
    client = Client()
    client.force_login(alice)

    page = client.get("/settings/notifications/").content.decode()
    metrics = client.get("/metrics").content.decode()

    status = re.search(r'data-testid="last-status-webhook">(.*?)</td>', page, re.S)
    assert status is not None and "failed" in status.group(1) and "answered 410" in status.group(1)
    assert 'gpu_portal_notification_deliveries{channel="webhook",status="failed"} 1.0' in metrics


def test_a_job_waiting_too_long_tells_its_owner_once_why(
    alice: User, smtp: SmtpReceiver, settings: Any
) -> None:
    settings.NOTIFY_WAITING_AFTER_MINUTES = 30
    subscribe(alice, {"channel": "email", "target": "", "events": ["job.waiting"]})
    job = job_submit(user=alice, data=training_spec(name="hog", gpu={"count": 8}, workers=2))
    blocker = job_submit(
        user=alice, data=training_spec(name="patient", gpu={"count": 8}, workers=2)
    )
    admission_run(team_id=job.team_id)  # the first takes all 16 GPUs; the second waits
    Job.objects.filter(pk=blocker.pk).update(created_at=timezone.now() - timedelta(minutes=41))

    assert jobs_waiting_check() == [blocker.pk]
    assert jobs_waiting_check() == []  # once per wait

    assert len(smtp.messages) == 1
    mail = smtp.messages[0]
    assert "has been waiting longer than expected" in mail["Subject"]
    body = mail.get_content()
    assert "It has been queued for 41 min: team vision uses 16 of 16" in body
    assert "Queue position: 1 in team vision" in body


def test_an_evicted_job_tells_its_owner_who_took_the_gpus(
    research: dict[str, Any], smtp: SmtpReceiver
) -> None:
    alice, dave = research["users"]["alice"], research["users"]["dave"]
    vision, robotics = research["teams"]["vision"], research["teams"]["robotics"]
    own = job_submit(user=alice, data=training_spec(name="own", gpu={"count": 8}, workers=2))
    borrower = job_submit(user=alice, data=training_spec(name="borrower", gpu={"count": 8}))
    admission_run(team_id=vision.pk)
    Job.objects.filter(pk__in=[own.pk, borrower.pk]).update(
        state=JobState.RUNNING, applied_at=timezone.now(), started_at=timezone.now()
    )
    job_submit(user=dave, data=training_spec(team="robotics", name="mine", gpu={"count": 8}))

    assert admission_run(team_id=robotics.pk).evicted == [borrower.pk]

    evicted = [m for m in smtp.messages if "was evicted" in m["Subject"]]
    assert len(evicted) == 1 and evicted[0]["To"] == "alice@example.com"
    assert "team robotics reclaimed 8 nvidia.com/gpu it had lent to vision" in (
        evicted[0].get_content()
    )


def test_settings_refuse_bad_input_naming_the_field(alice: User) -> None:
    api: APIClient = api_client_for(alice)

    unknown = api.put(
        "/api/v1/notifications/",
        {"channels": [{"channel": "email", "events": ["job.exploded"]}]},
        format="json",
    )
    no_url = api.put(
        "/api/v1/notifications/",
        {"channels": [{"channel": "slack", "target": "", "events": ["job.failed"]}]},
        format="json",
    )
    not_http = api.put(
        "/api/v1/notifications/",
        {"channels": [{"channel": "webhook", "target": "ftp://x", "events": []}]},
        format="json",
    )
    metadata = api.put(
        "/api/v1/notifications/",
        {"channels": [{"channel": "webhook", "target": "http://169.254.169.254/", "events": []}]},
        format="json",
    )

    assert unknown.status_code == 400
    assert "job.exploded" in unknown.json()["errors"]["channels[0].events[0]"][0]
    assert no_url.status_code == 400 and "slack.url" in no_url.json()["errors"]
    assert not_http.status_code == 400 and "webhook.url" in not_http.json()["errors"]
    assert metadata.status_code == 400 and "refused" in metadata.json()["detail"]
    events = api.get("/api/v1/notifications/").json()
    email = next(c for c in events["channels"] if c["channel"] == "email")
    # unchanged defaults
    assert email["events"] == [
        "job.failed",
        "job.evicted",
        "job.moved",
        "job.idle",
        "job.idle_stopped",
        "workspace.idle",
        "workspace.lifetime_stopped",
        "job.gpu_failed",
        "job.node_failed",
        "report.monthly",
        "node.gpu_failures",
    ]


def test_a_stuck_delivery_out_of_tries_fails_instead_of_going_round_again(alice: User) -> None:
    # Given a delivery claimed long ago by a run that is gone, its tries used up
    from notifications.models import Destination
    from notifications.services import deliveries_stuck_release

    destination = Destination.objects.create(user=alice, channel="webhook", target="https://x.io/")
    stuck = Delivery.objects.create(
        destination=destination,
        key="job:1:job.failed:1",
        event="job.failed",
        subject="s",
        body="b",
        status=Delivery.Status.SENDING,
        attempts=Delivery.MAX_ATTEMPTS,
        claimed_at=timezone.now() - timedelta(hours=1),
    )
    # When the sweep runs
    released = deliveries_stuck_release()
    # Then it is not sent again: it failed, saying why, on the settings page too
    stuck.refresh_from_db()
    destination.refresh_from_db()
    assert released == [] and stuck.status == "failed"
    assert "the worker sending it stopped" in stuck.last_error
    assert f"gave up after {Delivery.MAX_ATTEMPTS} tries" in stuck.last_error
    assert destination.last_status == "failed"
