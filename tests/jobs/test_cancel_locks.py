"""A cancel locks only the job's row. Admission holds its team's row (then the team's jobs')
while it decides; a cancel that locked the team too, in one ``SELECT … FOR UPDATE`` with a
join, waited on admission while admission waited on it: PostgreSQL's deadlock."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from jobs.models import JobState
from jobs.services.submit import job_cancel
from teams.models import Team
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cancel_does_not_wait_for_the_team_row_that_admission_holds() -> None:
    # Given admission holding the job's team row in a transaction of its own
    job = JobFactory()
    held, release = threading.Event(), threading.Event()

    def admission() -> None:
        with transaction.atomic():
            Team.objects.select_for_update().get(pk=job.team_id)
            held.set()
            release.wait(10)
        connection.close()

    other = threading.Thread(target=admission)
    other.start()
    try:
        assert held.wait(5)
        # When the owner cancels the job meanwhile, Then it is cancelled without waiting
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            cancelled = job_cancel(user=job.owner, job_id=job.pk)
    finally:
        release.set()
        other.join()
    assert cancelled.state == JobState.CANCELLED
