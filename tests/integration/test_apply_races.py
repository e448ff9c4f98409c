"""Two things that can happen to a job while its objects are being created, on the real
API server: another apply of the same job finishes first (a retried task and the one the
reconcile queued again after an outage run at once), or the user cancels it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from cluster import kube
from jobs.models import Job, JobState
from jobs.services import apply
from jobs.services.apply import ApplyOutcome, job_apply
from jobs.services.submit import job_cancel, job_submit
from tests.conftest import training_spec
from tests.sandbox_process import SandboxProcess

pytestmark = pytest.mark.django_db


def admitted_job(demo: dict[str, Any], name: str) -> Job:
    job = job_submit(user=demo["users"]["alice"], data=training_spec(name=name))
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now())
    return job


def while_creating(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object]) -> None:
    """Run ``meanwhile`` once, after this apply has created the job's objects and before it
    moves the row: the moment the other party gets in."""
    create = apply._apply_objects

    def create_then(job: Job) -> None:
        create(job)
        monkeypatch.setattr(apply, "_apply_objects", create)
        meanwhile()

    monkeypatch.setattr(apply, "_apply_objects", create_then)


def the_kubernetes_job(job: Job) -> kube.Obj | None:
    manifest = next(m for m in job.manifests if m["kind"] == "Job")
    try:
        return kube.get("Job", manifest["metadata"]["name"], manifest["metadata"]["namespace"])
    except kube.ObjectNotFound:
        return None


def test_an_apply_that_loses_to_another_apply_of_the_job_leaves_its_objects(
    cluster: SandboxProcess, demo: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an admitted job, and a second apply of it that finishes while the first one is
    # between creating the objects and moving the row
    job = admitted_job(demo, "applied-twice")
    other: list[ApplyOutcome] = []
    while_creating(monkeypatch, lambda: other.append(job_apply(job_id=job.pk)))

    # When the first apply goes on
    outcome = job_apply(job_id=job.pk)

    # Then it steps aside for the other, which applied it: the job is pending, its Job is
    # still in the cluster
    assert other == [ApplyOutcome.APPLIED]
    assert outcome == ApplyOutcome.NOT_DUE
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert the_kubernetes_job(job) is not None
    assert not job.events.filter(reason="Deleted").exists()


def test_a_job_cancelled_while_its_objects_are_created_leaves_nothing_behind(
    cluster: SandboxProcess, demo: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an admitted job whose owner cancels it while its objects are being created
    job = admitted_job(demo, "cancelled-midway")
    while_creating(monkeypatch, lambda: job_cancel(user=demo["users"]["alice"], job_id=job.pk))

    # When the apply goes on
    outcome = job_apply(job_id=job.pk)

    # Then it deletes what it created: nothing of the cancelled job runs
    assert outcome == ApplyOutcome.CANCELLED_MEANWHILE
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    found = the_kubernetes_job(job)
    assert found is None or found["metadata"].get("deletionTimestamp")
