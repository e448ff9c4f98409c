"""rows_insert: new rows stored as save() stores them, in one statement on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction
from django.db.models import Model, Value
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from core.db import Read, reads_fetch, rows_insert
from jobs.models import Job, JobEvent
from teams.models import AuditLog
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


def assert_stored_as_saved(rows: tuple[Model, ...], saved: tuple[Model, ...], name: str) -> None:
    """Each row is stored as its ``save()``d twin, but for the name the rows were made with."""
    for mine, theirs in zip(rows, saved, strict=True):
        assert not mine._state.adding
        expected = stored(theirs)
        if isinstance(mine, AuditLog):
            expected.update(target=name, changes={"name": name})
        if isinstance(mine, Job):
            expected.update(name=name)
        assert stored(mine) == expected


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
    assert_stored_as_saved(inserted, saved, "inserted")


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


def test_rows_inserted_again_are_stored_as_save_stores_them(alice: User) -> None:
    # given rows of the same models inserted before (their INSERT text is known by now)
    template = JobFactory(owner=alice)
    rows_insert(*new_rows(template, alice, "first"))
    saved = new_rows(template, alice, "saved")
    for obj in saved:
        obj.save(force_insert=True)

    # when more rows of those models are inserted
    again = new_rows(template, alice, "again")
    rows_insert(*again)

    # then each is stored as save() stores it, with its own values and timestamps
    assert_stored_as_saved(again, saved, "again")
    assert again[0].created_at > saved[0].created_at


def test_a_row_with_an_expression_value_is_compiled_for_itself(alice: User) -> None:
    # given the job INSERT compiled before for rows of plain values
    template = JobFactory(owner=alice)
    rows_insert(*new_rows(template, alice, "plain"))
    # when a row holds an expression where a plain value was
    job, event, entry = new_rows(template, alice, "expression")
    job.gpu_count = Value(3) + Value(4)  # type: ignore[assignment]
    rows_insert(job, event, entry)

    # then the database computed it, as save() would have
    assert Job.objects.get(name="expression").gpu_count == 7


def test_reads_are_sent_together_and_each_decoded(alice: User) -> None:
    # given three reads
    reads = [
        Read("SELECT username FROM auth_user WHERE id = %s", [alice.pk], lambda r: r[0][0]),
        Read("SELECT count(*) FROM auth_user WHERE username = %s", ["nobody"], lambda r: r),
        Read("SELECT %s::int + 1", [41], lambda r: r[0][0]),
    ]

    # when they are fetched
    with CaptureQueriesContext(connection) as captured:
        values = reads_fetch(*reads)

    # then each value comes from its own statement, in order, in one round trip
    assert values == ["alice", [(0,)], 42]
    assert len(captured.captured_queries) == (1 if connection.vendor == "postgresql" else 3)


def test_a_read_that_fails_fails_them_all() -> None:
    reads = [
        Read("SELECT 1", [], lambda r: r),
        Read("SELECT 1 FROM no_such_table", [], lambda r: r),
    ]

    with pytest.raises(DatabaseError, match="no_such_table"), transaction.atomic():
        reads_fetch(*reads)
