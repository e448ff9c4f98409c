"""Following a job through the API: timeline, queue position, start estimate, logs.

Database only: no cluster runs here, so the logs endpoint meets "no cluster" and
must say so plainly.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from cluster import kube
from cluster.priority_classes import PRIORITY_CLASS_VALUES
from jobs.models import Job, JobEvent, JobState
from teams.models import Team
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def make_job(
    team: Team,
    *,
    state: str = JobState.QUEUED,
    priority: str = "normal",
    gpus: int = 1,
    max_runtime_seconds: int | None = None,
    started_minutes_ago: int | None = None,
    **fields: Any,
) -> Job:
    """A stored job of ``team``; running jobs are admitted and hold their GPUs."""
    spec = {
        "team": team.slug,
        "name": "train",
        "kind": "training",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "gpu": {"count": gpus, "sharing": "exclusive", "product": None, "mig_profile": None},
        "max_runtime_seconds": max_runtime_seconds,
    }
    now = timezone.now()
    if state != JobState.QUEUED:
        fields.setdefault("admitted_at", now)
        fields.setdefault("applied_at", now)
    if started_minutes_ago is not None:
        fields["started_at"] = now - timedelta(minutes=started_minutes_ago)
    return JobFactory(
        team=team,
        owner=fields.pop("owner", None) or team.memberships.first().user,
        state=state,
        priority=priority,
        priority_value=PRIORITY_CLASS_VALUES[priority],
        spec=spec,
        gpu_count=gpus,
        demand={"nvidia.com/gpu": gpus},
        **fields,
    )


def test_events_are_the_timeline_oldest_first(alice_api: APIClient, demo: dict[str, Any]) -> None:
    # Given a running job with portal and Kubernetes events
    job = make_job(demo["teams"]["vision"], state=JobState.RUNNING)
    JobEvent.objects.create(job=job, reason="Submitted", message="Waiting for admission.")
    JobEvent.objects.create(job=job, reason="Admitted")
    JobEvent.objects.create(
        job=job,
        source=JobEvent.Source.KUBERNETES,
        type="Warning",
        reason="FailedScheduling",
        message="Pod/train-1-0: 0/5 nodes are available: 5 Insufficient nvidia.com/gpu.",
    )

    # When Alice reads the job's events
    response = alice_api.get(f"/api/v1/jobs/{job.pk}/events/")

    # Then she gets every event in the order it happened, with its source and type
    assert response.status_code == 200
    events = response.json()
    assert [e["reason"] for e in events] == ["Submitted", "Admitted", "FailedScheduling"]
    assert events[2]["source"] == "kubernetes" and events[2]["type"] == "Warning"
    assert events[2]["message"].endswith("5 Insufficient nvidia.com/gpu.")
    assert events[0]["created_at"] <= events[1]["created_at"] <= events[2]["created_at"]


def test_events_of_another_teams_job_are_not_found(
    carol_api: APIClient, demo: dict[str, Any]
) -> None:
    # Given a job of team vision
    job = make_job(demo["teams"]["vision"], state=JobState.RUNNING)
    JobEvent.objects.create(job=job, reason="Submitted")

    # When Carol (team nlp) asks for its events and logs
    events = carol_api.get(f"/api/v1/jobs/{job.pk}/events/")
    logs = carol_api.get(f"/api/v1/jobs/{job.pk}/logs/")

    # Then the job does not exist for her
    assert events.status_code == 404
    assert logs.status_code == 404


@pytest.mark.parametrize("tail", ["abc", "0", "9999", "-5"])
def test_logs_tail_must_be_an_integer_from_1_to_5000(
    alice_api: APIClient, demo: dict[str, Any], tail: str
) -> None:
    # Given a job of Alice's team
    job = make_job(demo["teams"]["vision"], state=JobState.RUNNING)

    # When she asks for a tail that is not 1..5000
    response = alice_api.get(f"/api/v1/jobs/{job.pk}/logs/", {"tail": tail})

    # Then the request is refused, naming the parameter
    assert response.status_code == 400
    assert "tail" in response.json()["errors"]


def test_queue_positions_follow_priority_then_submission_order(
    alice_api: APIClient, carol_api: APIClient, demo: dict[str, Any]
) -> None:
    # Given three queued jobs of two teams: vision normal, nlp normal, then vision high
    vision, nlp = demo["teams"]["vision"], demo["teams"]["nlp"]
    vision_normal = make_job(vision)
    nlp_normal = make_job(nlp)
    vision_high = make_job(vision, priority="high")

    # When their owners read them
    def position(client: APIClient, job: Job) -> dict[str, Any]:
        response = client.get(f"/api/v1/jobs/{job.pk}/")
        assert response.status_code == 200
        return response.json()["queue_position"]

    # Then the high-priority job is first everywhere, and equal priorities go first-come
    high = position(alice_api, vision_high)
    normal = position(alice_api, vision_normal)
    other_team = position(carol_api, nlp_normal)
    assert (high["team"], high["cluster"]) == (1, 1)
    assert (normal["team"], normal["cluster"]) == (2, 2)
    assert (other_team["team"], other_team["cluster"]) == (1, 3)


def test_admitted_and_running_jobs_have_no_queue_position(
    alice_api: APIClient, demo: dict[str, Any]
) -> None:
    # Given a running job and a queued job already admitted (waiting to be applied)
    vision = demo["teams"]["vision"]
    running = make_job(vision, state=JobState.RUNNING, started_minutes_ago=1)
    admitted = make_job(vision, admitted_at=timezone.now())

    # When Alice reads them, Then neither is in the queue, and the new fields are there
    body = alice_api.get(f"/api/v1/jobs/{running.pk}/").json()
    assert body["queue_position"] is None
    assert {"advice", "placement", "exit_code"} <= set(body)
    assert alice_api.get(f"/api/v1/jobs/{admitted.pk}/").json()["queue_position"] is None


def test_start_estimate_from_the_deadlines_of_running_jobs(
    alice_api: APIClient, demo: dict[str, Any]
) -> None:
    # Given team vision's 16 GPUs held by two running jobs with max runtimes
    vision = demo["teams"]["vision"]
    first_free = make_job(
        vision, state=JobState.RUNNING, gpus=8, max_runtime_seconds=3600, started_minutes_ago=10
    )
    make_job(
        vision, state=JobState.RUNNING, gpus=8, max_runtime_seconds=7200, started_minutes_ago=5
    )
    # and a queued job asking for 4 GPUs
    queued = make_job(vision, gpus=4)

    # When Alice reads the queued job
    position = alice_api.get(f"/api/v1/jobs/{queued.pk}/").json()["queue_position"]

    # Then it can start when the first running job reaches its deadline
    assert first_free.started_at is not None
    expected = first_free.started_at + timedelta(seconds=3600)
    assert datetime.fromisoformat(position["estimated_start"]) == expected
    assert position["blocking_resource"] == "nvidia.com/gpu"
    assert "max runtime" in position["estimate"]


def test_start_estimate_is_unknown_when_running_jobs_have_no_deadline(
    alice_api: APIClient, demo: dict[str, Any]
) -> None:
    # Given team vision's 16 GPUs held by running jobs without a max runtime
    vision = demo["teams"]["vision"]
    make_job(vision, state=JobState.RUNNING, gpus=8, started_minutes_ago=10)
    make_job(vision, state=JobState.RUNNING, gpus=8, max_runtime_seconds=600, started_minutes_ago=1)
    # and a queued job that needs more than the one deadline frees (12 > 8)
    queued = make_job(vision, gpus=12)

    # When Alice reads it
    position = alice_api.get(f"/api/v1/jobs/{queued.pk}/").json()["queue_position"]

    # Then the estimate says honestly that it is unknown
    assert position["estimated_start"] is None
    assert position["estimate"] == "unknown: running jobs have no deadline"
    assert position["team"] == 1


def test_logs_without_a_cluster_are_a_plain_503(
    alice_api: APIClient, demo: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    # Given no reachable cluster (the kubeconfig file does not exist)
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    settings.KUBE_IN_CLUSTER = False
    kube.reset_client()
    job = make_job(demo["teams"]["vision"], state=JobState.RUNNING)

    # When Alice asks for its logs
    response = alice_api.get(f"/api/v1/jobs/{job.pk}/logs/", {"tail": "50"})

    # Then she is told plainly that the cluster cannot be reached
    assert response.status_code == 503
    detail = response.json()["detail"]
    assert detail.startswith("cluster unreachable: ")
    assert "missing-kubeconfig" in detail or "No cluster configured" in detail
    kube.reset_client()


def test_logs_of_a_job_never_applied_say_it_has_not_started(
    alice_api: APIClient, demo: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    # Given a queued job (never applied) and no cluster at all
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    job = make_job(demo["teams"]["vision"])

    # When Alice asks for its logs
    response = alice_api.get(f"/api/v1/jobs/{job.pk}/logs/")

    # Then there are no pods, no error, and a note that it has not started
    assert response.status_code == 200
    body = response.json()
    assert body["pods"] == [] and body["error"] is None
    assert "not started" in body["detail"]
