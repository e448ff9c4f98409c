"""The job page's live part: polls while the job runs, explains pending jobs, survives
an unreachable cluster. Database only: the cluster here never answers."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from cluster import kube
from jobs.models import Job, JobEvent, JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

POLL = 'hx-trigger="every 2s"'
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)", re.I)
SCHEDULER_MESSAGE = (
    "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
    "4 Insufficient nvidia.com/gpu."
)


@pytest.fixture(autouse=True)
def no_cluster(settings: Any, tmp_path: Path) -> Any:
    """No cluster can be reached: the kubeconfig points at a file that does not exist."""
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    settings.KUBE_IN_CLUSTER = False
    kube.reset_client()
    yield
    kube.reset_client()


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def vision_job(demo: dict[str, Any], state: str, **fields: Any) -> Job:
    applied = {} if state == JobState.QUEUED else {"applied_at": timezone.now()}
    return JobFactory(
        team=demo["teams"]["vision"],
        owner=demo["users"]["alice"],
        state=state,
        **{"admitted_at": applied.get("applied_at"), **applied, **fields},
    )


def test_live_partial_of_a_running_job_keeps_polling(alice: User, demo: dict[str, Any]) -> None:
    # Given a running job
    job = vision_job(demo, JobState.RUNNING, reason="Running", message="1 of 1 workers running.")

    # When the page's live part is fetched
    response = client_for(alice).get(f"/jobs/{job.pk}/live/")

    # Then it asks htmx to fetch it again in 2 s, replacing itself
    assert response.status_code == 200
    page = response.content.decode()
    assert POLL in page
    assert f'hx-get="/jobs/{job.pk}/live/"' in page
    assert 'hx-swap="outerHTML"' in page
    assert 'data-testid="job-state">running<' in page


def test_live_partial_of_a_finished_job_stops_polling(alice: User, demo: dict[str, Any]) -> None:
    # Given a job that succeeded, with where it ran and its exit code
    job = vision_job(
        demo,
        JobState.SUCCEEDED,
        reason="Completed",
        exit_code=0,
        placement={
            "nodes": ["gpu-a100-0"],
            "pods": [{"name": "train-1-0-abcde", "node": "gpu-a100-0", "phase": "Succeeded"}],
        },
    )

    # When the live part is fetched
    page = client_for(alice).get(f"/jobs/{job.pk}/live/").content.decode()

    # Then it carries no polling trigger, but shows the last pods and the exit code
    assert "hx-trigger" not in page
    assert 'data-testid="job-state">succeeded<' in page
    assert "train-1-0-abcde" in page and "gpu-a100-0" in page
    assert 'data-testid="exit-code">0<' in page
    assert "Cancel</button>" not in page


def test_pending_box_shows_the_scheduler_message_and_advice(
    alice: User, demo: dict[str, Any]
) -> None:
    # Given a job the scheduler cannot place, with the portal's advice
    advice = "No node has NVIDIA-H100-80GB-HBM3 GPUs; choose NVIDIA-A100-SXM4-80GB."
    job = vision_job(
        demo, JobState.PENDING, reason="Unschedulable", message=SCHEDULER_MESSAGE, advice=advice
    )
    JobEvent.objects.create(
        job=job,
        source=JobEvent.Source.KUBERNETES,
        type="Warning",
        reason="FailedScheduling",
        message=f"Pod/x: {SCHEDULER_MESSAGE}",
    )

    # When the live part is fetched
    page = html.unescape(client_for(alice).get(f"/jobs/{job.pk}/live/").content.decode())

    # Then the "why pending" box shows both, and the timeline the Kubernetes event
    box = page[page.index('data-testid="why-pending"') :]
    assert SCHEDULER_MESSAGE in box
    assert advice in box
    assert "FailedScheduling" in page and "Kubernetes" in page


def test_queued_job_shows_its_queue_position_and_estimate(
    alice: User, demo: dict[str, Any]
) -> None:
    # Given a queued job, first in its team's queue, behind nothing
    job = vision_job(demo, JobState.QUEUED, reason="Submitted")

    # When the live part is fetched
    page = html.unescape(client_for(alice).get(f"/jobs/{job.pk}/live/").content.decode())

    # Then its position in the team's queue and cluster-wide are shown
    assert 'data-testid="queue-position">Position <strong>1</strong>' in page
    assert 'data-testid="start-estimate"' in page


def test_another_teams_live_partial_and_logs_are_not_found(
    carol: User, demo: dict[str, Any]
) -> None:
    # Given a job of team vision
    job = vision_job(demo, JobState.RUNNING)

    # When Carol (team nlp) fetches its live part and logs
    client = client_for(carol)

    # Then neither exists for her
    assert client.get(f"/jobs/{job.pk}/live/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/logs/").status_code == 404


def test_job_page_renders_when_the_cluster_is_unreachable(
    alice: User, demo: dict[str, Any]
) -> None:
    # Given a running job whose pods the reconciler saw, and a cluster that cannot be reached
    job = vision_job(
        demo,
        JobState.RUNNING,
        reason="Running",
        placement={
            "nodes": ["gpu-a100-1"],
            "pods": [{"name": "train-7-0-xyz", "node": "gpu-a100-1", "phase": "Running"}],
        },
    )
    client = client_for(alice)

    # When Alice opens the job page and its log section
    page = client.get(f"/jobs/{job.pk}/")
    logs = client.get(f"/jobs/{job.pk}/logs/")

    # Then the page renders with the last known pods and says the cluster is unreachable
    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-testid="job-state">running<' in text
    assert "cluster unreachable: " in text
    assert "train-7-0-xyz" in text and "gpu-a100-1" in text
    assert f'hx-get="/jobs/{job.pk}/logs/"' in text
    assert not INLINE_SCRIPT.search(text)  # htmx attributes and static JS only
    # and the log section says so plainly, without an error page, and keeps refreshing
    assert logs.status_code == 200
    log_text = logs.content.decode()
    assert 'data-testid="logs-error">cluster unreachable: ' in log_text
    assert 'hx-trigger="every 5s"' in log_text


def test_logs_of_a_queued_job_say_it_has_not_started(alice: User, demo: dict[str, Any]) -> None:
    # Given a queued job (never applied to the cluster)
    job = vision_job(demo, JobState.QUEUED)

    # When its log section is fetched
    response = client_for(alice).get(f"/jobs/{job.pk}/logs/")

    # Then it says the job has not started, with no error
    assert response.status_code == 200
    text = response.content.decode()
    assert "has not started" in text
    assert "logs-error" not in text
