"""Training progress and time to finish, end to end: the sandbox's trainer prints
GPU_PORTAL_PROGRESS lines, beat's progress pass reads rank 0's log, and the API, the job
page, the job list and the CLI show where the job stands and when it should finish; the
estimate lands within 20 % of the time the job really took.

Real processes: PostgreSQL, Redis, a Celery worker with beat, the sandbox (30× real time),
the portal's live server for the CLI.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from tests.conftest import api_client_for
from tests.integration.test_cli import JOB, logged_in, run
from tests.worker_process import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

KNOWN_LENGTH = 900  # seconds of cluster time: 180 steps of 5 s, a progress line every 10


def test_a_training_job_shows_its_progress_and_a_time_to_finish_that_holds(
    portal: dict[str, Any], home: Any, worker: WorkerProcess
) -> None:
    # Given a training job that runs 15 minutes of cluster time
    alice = portal["alice"]
    job = job_submit(
        user=alice,
        data={**JOB, "name": "known-length", "env": {"SANDBOX_DURATION": f"{KNOWN_LENGTH}s"}},
    )
    api = api_client_for(alice)

    # When it has run long enough for an estimate, Then the API says where it stands and
    # when it should finish, and how that was estimated
    def estimated() -> dict[str, Any] | None:
        shown = api.get(f"/api/v1/jobs/{job.pk}/").json()
        return shown if shown["eta_seconds"] is not None else None

    shown = wait_for(estimated, timeout=60)
    assert set(shown["progress"]) == {"percent", "step", "total", "source"}
    assert shown["progress"]["total"] == KNOWN_LENGTH // 5
    assert shown["progress"]["source"] == "log"
    assert 0 < shown["progress"]["percent"] < 100
    assert shown["eta_basis"].startswith("from its log: ")
    row = Job.objects.get(pk=job.pk)

    # ...and so do the job page, the job list and the CLI
    client = Client()
    client.force_login(alice)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"step {shown['progress']['step']} of 180" in page or "of 180" in page
    assert 'data-testid="job-eta"' in page and "about " in page
    listing = client.get("/jobs/").content.decode()
    assert "% " in listing or "left" in listing
    described = run(home, "describe", str(job.pk), env=logged_in(portal))
    assert described.returncode == 0, described.stderr
    assert "Progress:" in described.stdout and "/180)" in described.stdout
    assert "Time to finish:" in described.stdout
    wide = run(home, "ls", "-o", "wide", env=logged_in(portal))
    assert "PROGRESS" in wide.stdout.upper() and "/180)" in wide.stdout

    # Then the estimate holds: within 20 % of the time it really had left
    done = wait_for(
        lambda: (j := Job.objects.get(pk=job.pk)).state == JobState.SUCCEEDED and j, timeout=90
    )
    assert row.progress_at is not None and done.finished_at is not None
    actual = (done.finished_at - row.progress_at).total_seconds()
    assert row.eta_seconds is not None
    assert abs(row.eta_seconds - actual) <= 0.2 * actual, (row.eta_seconds, actual)
