"""GET /api/v1/teams/ and /api/v1/cohorts/: nominal, used, borrowed, lent and the limits,
with the names clients depend on; jobs carry ``borrowing`` and ``evictions``."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from jobs.models import Job, JobState
from jobs.services.admission import admission_run
from jobs.services.submit import job_submit
from teams.services import quota_set
from tests.conftest import api_client_for, training_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def borrowed(research: dict[str, Any]) -> dict[str, Any]:
    """vision runs 16 of its own GPUs and 4 of robotics' 8; robotics lends up to 6."""
    teams, users = research["teams"], research["users"]
    quota_set(
        actor=None, team=teams["robotics"], resource="nvidia.com/gpu", limit=8, lending_limit=6
    )
    quota_set(
        actor=None, team=teams["vision"], resource="nvidia.com/gpu", limit=16, borrowing_limit=4
    )
    jobs = [
        job_submit(user=users["alice"], data=training_spec(name=f"j{i}", gpu={"count": gpus}))
        for i, gpus in enumerate((8, 8, 4))
    ]
    admission_run(team_id=teams["vision"].pk)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(
        state=JobState.RUNNING, applied_at=timezone.now()
    )
    return {**research, "jobs": jobs}


def quota(team: dict[str, Any], resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return next(q for q in team["quotas"] if q["resource"] == resource)


def test_teams_say_their_cohort_and_what_they_borrow_and_lend(borrowed: dict[str, Any]) -> None:
    admin = borrowed["users"]["admin"]
    teams = {t["slug"]: t for t in api_client_for(admin).get("/api/v1/teams/").json()}

    assert teams["vision"]["cohort"] == "research"
    assert teams["nlp"]["cohort"] is None
    assert quota(teams["vision"]) == {
        "cluster": settings.CLUSTER_NAME,
        "resource": "nvidia.com/gpu",
        "limit": 16,
        "nominal": 16,
        "used": 20,
        "borrowed": 4,
        "lent": 0,
        "borrowing_limit": 4,
        "lending_limit": None,
        "percent": 100,
    }
    assert quota(teams["robotics"]) | {"percent": 0} == {
        "cluster": settings.CLUSTER_NAME,
        "resource": "nvidia.com/gpu",
        "limit": 8,
        "nominal": 8,
        "used": 0,
        "borrowed": 0,
        "lent": 4,
        "borrowing_limit": None,
        "lending_limit": 6,
        "percent": 0,
    }
    # a team outside any cohort has no limits to show
    assert quota(teams["nlp"], "NVIDIA-A100-SXM4-80GB")["borrowing_limit"] is None


def test_a_member_sees_their_teams_cohort_with_its_teams_and_totals(
    borrowed: dict[str, Any],
) -> None:
    alice: User = borrowed["users"]["alice"]
    api = api_client_for(alice)

    cohorts = api.get("/api/v1/cohorts/").json()
    one = api.get("/api/v1/cohorts/research/").json()

    assert [c["slug"] for c in cohorts] == ["research"]
    assert one == cohorts[0]
    assert [t["slug"] for t in one["teams"]] == ["robotics", "vision"]
    vision = one["teams"][1]
    assert vision["weight"] == 1.0 and vision["inference_may_borrow"] is False
    assert vision["borrowing_jobs"] == [borrowed["jobs"][2].pk]
    assert one["totals"] == [
        {"resource": "nvidia.com/gpu", "nominal": 24, "used": 20, "borrowed": 4, "unused": 4},
        {"resource": "nvidia.com/gpu.shared", "nominal": 8, "used": 0, "borrowed": 0, "unused": 8},
        {
            "resource": "nvidia.com/mig-1g.10gb",
            "nominal": 8,
            "used": 0,
            "borrowed": 0,
            "unused": 8,
        },
    ]


def test_a_cohort_of_other_teams_is_not_found(borrowed: dict[str, Any]) -> None:
    carol = borrowed["users"]["carol"]  # nlp: in no cohort
    api = api_client_for(carol)
    assert api.get("/api/v1/cohorts/").json() == []
    response = api.get("/api/v1/cohorts/research/")
    assert response.status_code == 404
    assert api.get("/api/v1/cohorts/nope/").status_code == 404


def test_jobs_say_whether_they_borrow_and_how_often_they_were_evicted(
    borrowed: dict[str, Any],
) -> None:
    api = api_client_for(borrowed["users"]["alice"])
    listed = {j["id"]: j for j in api.get("/api/v1/jobs/").json()["results"]}
    last = borrowed["jobs"][2]
    assert [(listed[j.pk]["borrowing"], listed[j.pk]["evictions"]) for j in borrowed["jobs"]] == [
        (False, 0),
        (False, 0),
        (True, 0),
    ]
    # When robotics reclaims what vision borrowed
    job_submit(
        user=borrowed["users"]["dave"],
        data=training_spec(team="robotics", name="mine", gpu={"count": 8}),
    )
    admission_run(team_id=borrowed["teams"]["robotics"].pk)
    evicted = api.get(f"/api/v1/jobs/{last.pk}/").json()
    # Then the borrowing job is back in the queue, and says who took its GPUs
    assert (evicted["state"], evicted["reason"], evicted["evictions"]) == (
        "queued",
        "Preempted",
        1,
    )
    assert "team robotics reclaimed 4 nvidia.com/gpu it had lent to vision" in evicted["message"]


def test_the_preview_answers_with_the_cohort_in_mind(borrowed: dict[str, Any]) -> None:
    users = borrowed["users"]
    # vision, at 20 of 16 with a borrowing limit of 4, cannot borrow more
    vision = api_client_for(users["alice"]).post(
        "/api/v1/jobs/preview/", training_spec(name="more", gpu={"count": 1}), format="json"
    )
    assert vision.json()["fit"]["quota"] == "waits"
    assert vision.json()["fit"]["message"] == (
        "Waits for quota: team vision uses 20 of 16 nvidia.com/gpu (nominal); would exceed "
        "vision's borrowing limit (4)."
    )
    # robotics asking for its own 8 would take back the 4 it lent
    robotics = api_client_for(users["dave"]).post(
        "/api/v1/jobs/preview/",
        training_spec(team="robotics", name="mine", gpu={"count": 8}),
        format="json",
    )
    fit = robotics.json()["fit"]
    last = borrowed["jobs"][2].pk
    assert (fit["verdict"], fit["quota"], fit["preempted_jobs"]) == ("preempts", "preempts", [last])
    assert fit["message"] == (
        f"Fits on team robotics's nominal quota by taking back what it lent: it evicts "
        f"vision #{last}, running on borrowed quota; they are re-queued."
    )
    # and without its borrowing limit, vision's next GPU fits on what robotics leaves idle
    quota_set(
        actor=None,
        team=borrowed["teams"]["vision"],
        resource="nvidia.com/gpu",
        limit=16,
        borrowing_limit=None,
    )
    more = api_client_for(users["alice"]).post(
        "/api/v1/jobs/preview/", training_spec(name="more", gpu={"count": 1}), format="json"
    )
    assert more.json()["fit"]["quota"] == "borrowing"
    assert (
        "Fits by borrowing 1 nvidia.com/gpu from cohort research; it may be evicted and "
        "re-queued if a lending team needs its GPUs back." in more.json()["fit"]["message"]
    )
