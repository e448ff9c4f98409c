"""rows_insert: new rows stored as save() stores them, in one statement on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Model
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from jobs.models import Job, JobEvent
from portal.db import rows_insert
from portal.models import AuditLog
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

UNCOMPARED = {"id", "job", "created_at", "updated_at"}


def stored(obj: Model) -> dict[str, Any]:
    fresh = type(obj).objects.get(pk=obj.pk)
    return {k: v for k, v in model_to_dict(fresh).items() if k not in UNCOMPARED}


def new_rows(template: Job, user: User, name: str) -> tuple[Job, JobEvent, AuditLog]:
    job = JobFactory.build(
        team=template.team, owner=user, name=name, spec=template.spec, placement={"a": [1]}
    )
    job.pk = Job.objects.order_by("-pk").values_list("pk", flat=True)[0] + 100
    event = JobEvent(job=job, reason="Submitted", message="Submitted by alice.")
    entry = AuditLog(actor=user, action="job.submit", target=name, changes={"name": name})
    return job, event, entry


def test_rows_are_stored_as_save_stores_them_in_one_statement(alice: User) -> None:
    # given the same new rows twice: one set saved, one for rows_insert
    template = JobFactory(owner=alice)
    saved = new_rows(template, alice, "saved")
    for obj in saved:
        obj.save(force_insert=True)
    inserted = new_rows(template, alice, "inserted")

    # when the second set is inserted together
    with CaptureQueriesContext(connection) as captured:
        rows_insert(*inserted)

    # then one statement stored them, ids and timestamps set, each as save() stores it
    assert len(captured.captured_queries) == (1 if connection.vendor == "postgresql" else 3)
    job, event, entry = inserted
    assert event.pk is not None and entry.pk is not None and event.job_id == job.pk
    assert job.created_at is not None and event.created_at is not None
    for mine, theirs in zip(inserted, saved, strict=True):
        assert not mine._state.adding
        expected = stored(theirs)
        if isinstance(mine, AuditLog):
            expected.update(target="inserted", changes={"name": "inserted"})
        if isinstance(mine, Job):
            expected.update(name="inserted")
        assert stored(mine) == expected


def test_a_row_inserted_together_is_then_updated_by_save(alice: User) -> None:
    job, event, entry = new_rows(JobFactory(owner=alice), alice, "later")
    rows_insert(job, event, entry)

    job.reason = "Admitted"
    job.save()

    assert Job.objects.filter(name="later").count() == 1
    assert Job.objects.get(name="later").reason == "Admitted"


def test_a_relation_to_an_unsaved_row_is_refused_as_save_refuses_it(alice: User) -> None:
    job = JobFactory.build(owner=alice, team=JobFactory(owner=alice).team)
    event = JobEvent(job=job, reason="Submitted")
    entry = AuditLog(actor=alice, action="job.submit")

    with pytest.raises(ValueError, match="unsaved related object"):
        rows_insert(entry, event)
