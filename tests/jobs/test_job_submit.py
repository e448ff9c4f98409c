"""job_submit's cost: a fixed number of queries, whatever the database already holds."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job
from jobs.services.submit import job_preview, job_submit
from teams.models import AuditLog
from tests.conftest import training_spec
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

# The reads (the team by membership with its quotas; the clusters it may run on; the
# catalog), then the job, its manifests (which carry its id) and cluster, its event and
# audit entry.
SUBMIT_QUERIES = 7


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


def test_the_job_is_stored_with_manifests_named_by_its_id(alice: User) -> None:
    job_submit(user=alice, data=training_spec(name="named"))

    job = Job.objects.get(name="named")
    assert job.object_name == f"named-{job.pk}"
    labels = job.manifests[0]["metadata"]["labels"]
    assert labels["gpu-portal.dev/job-id"] == str(job.pk)
    assert list(job.events.values_list("reason", flat=True)) == ["Submitted"]


def test_a_manifest_refused_at_submit_stores_nothing(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given manifests that fail schema validation (a builder bug)
    from jobs.services import submit as services

    monkeypatch.setattr(services, "validate_manifests", lambda *a, **k: ["spec: broken"])
    before = (Job.objects.count(), AuditLog.objects.count())

    # When alice submits, the submission is refused
    with pytest.raises(services.ManifestInvalid):
        job_submit(user=alice, data=training_spec(name="refused"))

    # Then neither the job nor its audit entry was kept
    assert (Job.objects.count(), AuditLog.objects.count()) == before


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


def test_a_submission_builds_one_manifest_context(alice: User, monkeypatch: Any) -> None:
    # The manifests and the object's name come from the same context (it held the team's
    # LocalQueue, looked up once): building three per submission let them disagree.
    from jobs.services import submit

    built: list[int] = []

    def counted(checked: Any, **kwargs: Any) -> Any:
        built.append(kwargs["job_id"])
        return make(checked, **kwargs)

    make = submit.manifest_context
    monkeypatch.setattr(submit, "manifest_context", counted)
    job = job_submit(user=alice, data=training_spec())

    assert built == [job.pk]
