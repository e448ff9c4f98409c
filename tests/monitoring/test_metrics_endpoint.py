"""The portal's own /metrics: read from the database (and Redis) at scrape time, so every
gunicorn worker answers the same numbers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import Job, JobState
from jobs.tracking.timings import RECONCILE_KEY, reconcile_observe, reconcile_timer
from tests.factories import JobFactory


def scrape(client: Client | None = None, **headers: str) -> dict[str, dict[tuple[Any, ...], float]]:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples: dict[str, dict[tuple[Any, ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


@pytest.fixture(autouse=True)
def _clean_reconcile_metrics() -> Any:
    r = redis.Redis.from_url(django_settings.REDIS_URL)
    r.delete(RECONCILE_KEY)
    yield
    r.delete(RECONCILE_KEY)


def test_jobs_by_team_and_state_and_queue_length(demo: dict[str, Any]) -> None:
    # Given vision with 2 queued and 1 running job (4 GPUs), nlp with 1 failed job
    vision, nlp = demo["teams"]["vision"], demo["teams"]["nlp"]
    JobFactory.create_batch(2, team=vision, state=JobState.QUEUED)
    JobFactory(team=vision, state=JobState.RUNNING, gpu_count=4)
    JobFactory(team=nlp, state=JobState.FAILED)
    # When Prometheus scrapes /metrics (no login)
    samples = scrape()
    # Then it sees the jobs by team and state, their GPUs, and each team's queue
    jobs = samples["gpu_portal_jobs"]
    assert jobs[(("state", "queued"), ("team", "vision"))] == 2
    assert jobs[(("state", "running"), ("team", "vision"))] == 1
    assert jobs[(("state", "failed"), ("team", "nlp"))] == 1
    assert samples["gpu_portal_jobs_gpus"][(("state", "running"), ("team", "vision"))] == 4
    queue = samples["gpu_portal_queue_length"]
    assert queue[(("team", "vision"),)] == 2 and queue[(("team", "nlp"),)] == 0


def test_admission_wait_histogram_from_created_and_admitted_times(demo: dict[str, Any]) -> None:
    # Given jobs admitted 3 s, 100 s and 2 h after submission, and one still waiting
    vision = demo["teams"]["vision"]
    for seconds in (3, 100, 7200):
        job = JobFactory(team=vision, state=JobState.RUNNING)
        Job.objects.filter(pk=job.pk).update(
            admitted_at=job.created_at + timedelta(seconds=seconds)
        )
    JobFactory(team=vision, state=JobState.QUEUED)
    # When scraped
    samples = scrape()
    buckets = {
        dict(k)["le"]: v for k, v in samples["gpu_portal_admission_wait_seconds_bucket"].items()
    }
    # Then the cumulative buckets place each wait, and the sum is their total
    assert (buckets["1.0"], buckets["5.0"], buckets["300.0"], buckets["3600.0"]) == (0, 1, 2, 2)
    assert buckets["+Inf"] == 3
    assert samples["gpu_portal_admission_wait_seconds_count"][()] == 3
    assert samples["gpu_portal_admission_wait_seconds_sum"][()] == pytest.approx(7303)


def test_reconcile_durations_reported_by_any_process_are_scraped(db: Any) -> None:
    # Given two reconcile runs timed in a worker process (shared through Redis)
    reconcile_observe(0.2)
    with reconcile_timer():
        pass
    # When scraped from the web process
    samples = scrape()
    # Then both runs are in the histogram
    assert samples["gpu_portal_reconcile_duration_seconds_count"][()] == 2
    buckets = {
        dict(k)["le"]: v for k, v in samples["gpu_portal_reconcile_duration_seconds_bucket"].items()
    }
    assert buckets["0.05"] == 1 and buckets["0.25"] == 2
    assert samples["gpu_portal_reconcile_duration_seconds_sum"][()] == pytest.approx(0.2, abs=0.05)


def test_metrics_token_guards_the_endpoint_when_set(db: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    samples = scrape(HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")
    assert "gpu_portal_admission_wait_seconds_count" in samples


def test_scrape_time_is_now(db: Any) -> None:
    # A freshly created job is visible at the very next scrape: nothing is cached in-process.
    before = scrape().get("gpu_portal_jobs", {})
    JobFactory(state=JobState.PENDING, started_at=timezone.now())
    after = scrape()["gpu_portal_jobs"]
    assert sum(after.values()) == sum(before.values()) + 1
