"""A job as the API renders it: the written-out fields are what the ModelSerializer renders."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from rest_framework import serializers

from jobs.apis import JobDetailOutput, JobOutput
from jobs.models import Job, JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def generic_rendering(serializer_class: type[JobOutput], job: Job) -> dict[str, Any]:
    """What DRF's own ModelSerializer machinery makes of ``Meta.fields``, spec keys after."""
    data = dict(serializers.ModelSerializer.to_representation(serializer_class(job), job))
    for key, value in job.spec.items():
        data.setdefault(key, value)
    return data


def jobs_in_every_shape() -> list[Job]:
    queued = JobFactory(state=JobState.QUEUED, reason="Submitted", message="Waiting.")
    running = JobFactory(
        kind="inference",
        priority="high",
        state=JobState.RUNNING,
        admitted_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        started_at=datetime(2026, 1, 2, 3, 5, tzinfo=UTC),
        placement={"nodes": ["gpu-a100-0"]},
        object_name="serve-2",
    )
    failed = JobFactory(
        state=JobState.FAILED,
        exit_code=137,
        advice="Out of memory: ask for more.",
        finished_at=datetime(2026, 1, 2, 4, 0, tzinfo=UTC),
        spec={"team": "x", "name": "y", "kind": "training", "gpu": {"count": 0}, "id": "spec's"},
    )
    # As read back from the database (strings for choices, aware datetimes from PostgreSQL).
    return [queued, running, failed, *Job.objects.filter(pk__in=[queued.pk, running.pk, failed.pk])]


@pytest.mark.parametrize("serializer_class", [JobOutput, JobDetailOutput])
def test_every_field_renders_as_the_model_serializer_renders_it(
    serializer_class: type[JobOutput],
) -> None:
    # given jobs queued, running and failed, fresh and read back
    for job in jobs_in_every_shape():
        # when the API renders one
        data = serializer_class(job).data

        # then it is the generic rendering, keys in the same order
        assert list(data.items()) == list(generic_rendering(serializer_class, job).items())


def test_a_list_renders_each_job_the_same_way() -> None:
    jobs = jobs_in_every_shape()

    data = JobOutput(jobs, many=True).data

    assert [dict(d) for d in data] == [generic_rendering(JobOutput, job) for job in jobs]
