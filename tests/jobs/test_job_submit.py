"""job_submit's cost: a fixed number of queries, whatever the database already holds."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job
from jobs.services import job_preview, job_submit
from tests.conftest import training_spec
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

# The reads in one round trip (team by membership with its quotas; the catalog's settings,
# GPU products and MIG profiles; the job's id), then the job, its event and its audit entry
# in one statement.
SUBMIT_QUERIES = 2


def _submit_queries(user: User, **spec: Any) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        job_submit(user=user, data=training_spec(**spec))
    return [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]


def test_a_submit_costs_a_fixed_number_of_queries(alice: User) -> None:
    queries = _submit_queries(alice)

    assert len(queries) == SUBMIT_QUERIES, "\n".join(queries)


def test_the_job_row_is_written_once_with_its_manifests(alice: User) -> None:
    queries = _submit_queries(alice, name="once")

    job = Job.objects.get(name="once")
    assert [q for q in queries if q.startswith('UPDATE "jobs_job"')] == []
    assert job.object_name == f"once-{job.pk}"
    labels = job.manifests[0]["metadata"]["labels"]
    assert labels["gpu-portal.dev/job-id"] == str(job.pk)


def test_the_query_count_does_not_grow_with_the_jobs_stored(alice: User) -> None:
    few = len(_submit_queries(alice, name="first"))
    team = Job.objects.get(name="first").team
    JobFactory.create_batch(40, team=team, owner=alice)

    many = len(_submit_queries(alice, name="after-forty"))

    assert many == few


def test_a_preview_takes_no_job_id(alice: User) -> None:
    # given a submitted job
    first = job_submit(user=alice, data=training_spec(name="before"))

    # when the user previews specs, and then submits the next job
    for _ in range(3):
        job_preview(user=alice, data=training_spec(name="look"), with_fit=False)
    after = job_submit(user=alice, data=training_spec(name="after"))

    # then only submissions took ids: the jobs' numbers have no gap
    assert after.pk == first.pk + 1
    assert after.object_name == f"after-{after.pk}"
