"""Admission order and reasons (the service, on PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from jobs.models import Job, JobState
from jobs.services.admission import admission_run
from jobs.services.submit import job_submit
from teams.services import quota_set
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db


def submit(user: User, **overrides: Any) -> Job:
    return job_submit(user=user, data=training_spec(**overrides))


def test_higher_priority_jobs_are_admitted_first_then_fifo(
    alice: User, demo: dict[str, Any]
) -> None:
    vision = demo["teams"]["vision"]
    normal_1 = submit(alice, name="n1", gpu={"count": 8})
    low = submit(alice, name="low", gpu={"count": 8}, priority="low")
    normal_2 = submit(alice, name="n2", gpu={"count": 8})
    high = submit(alice, name="high", gpu={"count": 8}, priority="high")

    result = admission_run(team_id=vision.pk)

    assert result.admitted == [high.pk, normal_1.pk]
    # The first job that waits explains its team's queue
    assert set(result.waiting) == {normal_2.pk}
    n2 = Job.objects.get(pk=normal_2.pk)
    assert n2.state == JobState.QUEUED and n2.admitted_at is None
    assert n2.message == "team vision uses 16 of 16 nvidia.com/gpu; 0 jobs ahead"
    assert Job.objects.get(pk=low.pk).message.endswith("; 1 job ahead")


def test_a_job_that_does_not_fit_blocks_the_ones_behind_it(
    alice: User, demo: dict[str, Any]
) -> None:
    # Strict order: a big job is never starved by a stream of small ones behind it.
    vision = demo["teams"]["vision"]
    submit(alice, name="a", gpu={"count": 6}, workers=2)
    big = submit(alice, name="b", gpu={"count": 8})
    small = submit(alice, name="c", gpu={"count": 1})

    result = admission_run(team_id=vision.pk)

    assert big.pk in result.waiting
    assert Job.objects.get(pk=small.pk).admitted_at is None
    assert Job.objects.get(pk=small.pk).message == (
        "team vision uses 12 of 16 nvidia.com/gpu; 1 job ahead"
    )


def test_finished_jobs_free_their_quota(alice: User, demo: dict[str, Any]) -> None:
    vision = demo["teams"]["vision"]
    first = submit(alice, name="a", gpu={"count": 8}, workers=2)
    second = submit(alice, name="b", gpu={"count": 4})
    admission_run(team_id=vision.pk)
    assert Job.objects.get(pk=second.pk).admitted_at is None

    Job.objects.filter(pk=first.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    result = admission_run(team_id=vision.pk)

    assert result.admitted == [second.pk]


def test_admission_runs_twice_without_admitting_twice(alice: User, demo: dict[str, Any]) -> None:
    vision = demo["teams"]["vision"]
    job = submit(alice, name="a", gpu={"count": 2})

    assert admission_run(team_id=vision.pk).admitted == [job.pk]
    assert admission_run(team_id=vision.pk).admitted == []
    assert Job.objects.get(pk=job.pk).events.filter(reason="Admitted").count() == 1


def test_a_long_queue_is_read_page_by_page_and_admitted_in_order(
    alice: User, demo: dict[str, Any]
) -> None:
    # Given 70 one-GPU jobs queued for a quota of 60: more than one page of the queue
    vision = demo["teams"]["vision"]
    quota_set(actor=None, team=vision, resource="nvidia.com/gpu", limit=60)
    jobs = [submit(alice, name=f"j{i}") for i in range(70)]

    result = admission_run(team_id=vision.pk)

    # Then the first 60 in queue order are admitted, and the rest wait in order
    assert result.admitted == [j.pk for j in jobs[:60]]
    assert Job.objects.get(pk=jobs[60].pk).message.endswith("; 0 jobs ahead")
    assert Job.objects.get(pk=jobs[69].pk).message.endswith("; 9 jobs ahead")
