"""GET /api/v1/jobs/ costs a fixed number of SQL queries and pages newest first."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import Job, JobState
from tests.factories import JobFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def queries_of(api: APIClient, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = api.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries)


def test_list_queries_do_not_grow_with_rows(alice: User, demo: dict[str, Any]) -> None:
    # Given alice in vision and nlp with 5 jobs, each of its own owner
    vision, nlp = demo["teams"]["vision"], demo["teams"]["nlp"]
    MembershipFactory(user=alice, team=nlp)
    for _ in range(5):
        JobFactory(team=vision, owner=UserFactory())
    # (a session, not a token: a token records its use once a minute, one query more)
    alice_api = APIClient()
    alice_api.force_login(alice)
    few = queries_of(alice_api, "/api/v1/jobs/")
    # When 50 more jobs of both teams fill more than a page
    for i in range(50):
        JobFactory(team=nlp if i % 2 else vision, owner=UserFactory(), state=JobState.RUNNING)
    full_page = queries_of(alice_api, "/api/v1/jobs/")
    second_page = queries_of(alice_api, "/api/v1/jobs/?page=2")
    # Then a full page and a deep one read as many queries as the 5-job list
    assert full_page == second_page == few


def test_list_pages_newest_first_with_every_field(
    alice: User, alice_api: APIClient, demo: dict[str, Any]
) -> None:
    # Given 60 jobs of vision, some submitted in the same instant (ties go to the higher id)
    jobs = JobFactory.create_batch(60, team=demo["teams"]["vision"], owner=alice)
    start = timezone.now() - timedelta(days=1)
    for i, job in enumerate(jobs):
        Job.objects.filter(pk=job.pk).update(created_at=start + timedelta(minutes=i // 4))
    newest_first = list(Job.objects.order_by("-created_at", "-id").values_list("pk", flat=True))
    # When alice reads both pages
    first = alice_api.get("/api/v1/jobs/").json()
    second = alice_api.get(first["next"]).json()
    # Then every job comes once, newest first, each with its team, owner and spec
    listed = [job["id"] for job in first["results"] + second["results"]]
    assert listed == newest_first
    assert first["count"] == 60 and len(first["results"]) == 50 and second["next"] is None
    one = first["results"][0]
    assert (one["team"], one["owner"], one["spec"]["image"]) == (
        "vision",
        "alice",
        "nvcr.io/nvidia/pytorch:24.05-py3",
    )
    assert "manifests" not in one and one["image"] == one["spec"]["image"]


def test_page_size_can_be_asked_for_up_to_200(
    alice: User, alice_api: APIClient, demo: dict[str, Any]
) -> None:
    # Given 12 jobs of vision
    JobFactory.create_batch(12, team=demo["teams"]["vision"], owner=alice)
    # When alice asks for pages of 5, and for more than the cap
    small = alice_api.get("/api/v1/jobs/", {"page_size": 5}).json()
    capped = alice_api.get("/api/v1/jobs/", {"page_size": 10_000}).json()
    # Then she gets 5 a page, and at most the cap (here every job)
    assert len(small["results"]) == 5 and small["count"] == 12 and "page_size=5" in small["next"]
    assert len(capped["results"]) == 12 and capped["next"] is None
