"""The job list and the job page cost a fixed number of SQL queries, however many rows.

A page that reads one more query per row (a team, an owner or a column the list left out)
is fast with the few jobs of a test and slow with the thousands of a real cluster, so the
count is pinned here; bench/bench_pages.py measures the time.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import Job, JobEvent, JobState
from tests.factories import JobFactory, MembershipFactory, UserFactory
from tests.web.test_job_pages import JOB_LINK_RE

pytestmark = pytest.mark.django_db


def queries_of(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries)


def jobs_of_many_owners(count: int, **fields: Any) -> list[Job]:
    """``count`` jobs, each of its own owner: a per-row lookup of the owner would show."""
    return [JobFactory(owner=UserFactory(), **fields) for _ in range(count)]


def listed_in_order(page: str) -> list[int]:
    return [int(pk) for pk in JOB_LINK_RE.findall(page)]


def test_job_list_queries_do_not_grow_with_rows_or_pages(
    client: Client, alice: User, demo: dict[str, Any]
) -> None:
    # Given alice in vision and nlp, with 5 jobs to list
    vision, nlp = demo["teams"]["vision"], demo["teams"]["nlp"]
    MembershipFactory(user=alice, team=nlp)
    jobs_of_many_owners(5, team=vision)
    client.force_login(alice)
    few = queries_of(client, "/jobs/")
    # When 50 more jobs of both teams, each of another owner, fill more than a page
    jobs_of_many_owners(30, team=vision)
    jobs_of_many_owners(20, team=nlp, state=JobState.RUNNING)
    full_page = queries_of(client, "/jobs/")
    second_page = queries_of(client, "/jobs/?page=2")
    filtered = queries_of(client, "/jobs/?team=vision&state=queued")
    # Then every list page reads as many queries as the 5-job list
    assert full_page == second_page == filtered == few


def test_job_list_pages_newest_first_without_gaps(
    client: Client, alice: User, demo: dict[str, Any]
) -> None:
    # Given 120 jobs of vision, some submitted in the same instant (ties go to the higher id)
    jobs = JobFactory.create_batch(120, team=demo["teams"]["vision"], owner=alice)
    start = timezone.now() - timedelta(days=1)
    for i, job in enumerate(jobs):
        Job.objects.filter(pk=job.pk).update(created_at=start + timedelta(minutes=i // 3))
    newest_first = list(Job.objects.order_by("-created_at", "-id").values_list("pk", flat=True))
    client.force_login(alice)
    # When alice walks the three pages
    pages = [client.get("/jobs/", {"page": n}).content.decode() for n in (1, 2, 3)]
    # Then they list every job once, newest first, 50 a page, with the pager as before
    assert [pk for page in pages for pk in listed_in_order(page)] == newest_first
    assert "Page 3 of 3" in pages[2]
    assert (
        listed_in_order(client.get("/jobs/", {"page": 99}).content.decode()) == (newest_first[100:])
    )


def test_job_list_shows_each_rows_team_owner_and_state(
    client: Client, alice: User, demo: dict[str, Any]
) -> None:
    # Given a running job of bob's in vision
    job = JobFactory(
        team=demo["teams"]["vision"],
        owner=demo["users"]["bob"],
        state=JobState.RUNNING,
        reason="Running",
        gpu_count=8,
        priority="high",
    )
    client.force_login(alice)
    # When alice opens the list
    page = client.get("/jobs/").content.decode()
    # Then the row shows the job's columns, read from the page's one query
    row = page.split(f'href="/jobs/{job.pk}/"')[1].split("</tr>")[0]
    for text in ("vision", "training", "<td>8</td>", "high", "state-running", "Running", "bob"):
        assert text in row


def test_job_page_queries_do_not_grow_with_timeline_or_queue(
    client: Client, alice: User, demo: dict[str, Any]
) -> None:
    # Given a queued job of vision with a short timeline, and nothing queued before it
    vision = demo["teams"]["vision"]
    job = JobFactory(team=vision, owner=alice, state=JobState.QUEUED, priority_value=1_000)
    JobEvent.objects.create(job=job, reason="Submitted")
    client.force_login(alice)
    urls = [f"/jobs/{job.pk}/", f"/jobs/{job.pk}/live/"]
    before = [queries_of(client, url) for url in urls]
    # When its timeline grows to 20 events and 10 higher-priority jobs queue ahead of it
    JobEvent.objects.bulk_create(JobEvent(job=job, reason=f"BackOff{i}") for i in range(19))
    jobs_of_many_owners(10, team=vision, state=JobState.QUEUED)
    after = [queries_of(client, url) for url in urls]
    # Then the job page and its polled partial read as many queries as before
    assert after == before
