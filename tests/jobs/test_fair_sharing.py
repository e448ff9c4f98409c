"""Sharing idle GPUs in a cohort: borrowing, limits, fair-share order, reclaim and
preemption choices, and the words a waiting or evicted job shows (the admission service,
on PostgreSQL). The eviction's cluster side is in tests/integration/test_reclaim.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from core.errors import ApplicationError
from jobs.models import Job, JobState
from jobs.services.admission import admission_run
from jobs.services.submit import job_submit
from teams.models import Cohort, GpuQuota, Membership, Team
from teams.services import quota_set
from tests.conftest import inference_spec, training_spec, workspace_spec

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"


@pytest.fixture
def vision(research: dict[str, Any]) -> Team:
    return research["teams"]["vision"]


@pytest.fixture
def robotics(research: dict[str, Any]) -> Team:
    return research["teams"]["robotics"]


@pytest.fixture
def alice(research: dict[str, Any]) -> User:
    return research["users"]["alice"]


@pytest.fixture
def dave(research: dict[str, Any]) -> User:
    return research["users"]["dave"]


def submit(user: User, team: str, gpus: int, *, name: str, workers: int = 1, **extra: Any) -> Job:
    spec = training_spec(team=team, name=name, gpu={"count": gpus}, workers=workers, **extra)
    return job_submit(user=user, data=spec)


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def run_all(*jobs: Job) -> None:
    """What the cluster would say once the admitted jobs' pods run."""
    Job.objects.filter(pk__in=[j.pk for j in jobs], admitted_at__isnull=False).update(
        state=JobState.RUNNING, applied_at=timezone.now(), started_at=timezone.now()
    )


# --- borrowing ------------------------------------------------------------------------------


def test_a_team_borrows_idle_cohort_quota_and_the_borrowing_job_is_marked(
    alice: User, vision: Team
) -> None:
    # Given vision (16 GPUs) and robotics (8, idle) in cohort research
    jobs = [submit(alice, "vision", 8, name=f"j{i}") for i in range(4)]
    # When admission runs
    result = admission_run(team_id=vision.pk)
    # Then vision uses its 16 and robotics' idle 8: the third job borrows
    assert result.admitted == [j.pk for j in jobs[:3]]
    assert [fresh(j).borrowing for j in jobs[:3]] == [False, False, True]
    assert "borrowed from cohort research" in fresh(jobs[2]).message
    # and the fourth says why it waits, word for word
    assert fresh(jobs[3]).message == (
        "team vision uses 24 of 16 nvidia.com/gpu (nominal) and may borrow 0 more; the cohort "
        "research has 0 unused: robotics uses 0 of its 8; 0 jobs ahead"
    )


def test_a_job_stops_borrowing_when_the_team_is_back_within_nominal(
    alice: User, vision: Team
) -> None:
    jobs = [submit(alice, "vision", 8, name=f"j{i}") for i in range(3)]
    admission_run(team_id=vision.pk)
    assert fresh(jobs[2]).borrowing
    # When one of its nominal jobs finishes
    Job.objects.filter(pk=jobs[0].pk).update(state=JobState.SUCCEEDED)
    admission_run(team_id=vision.pk)
    # Then the third job runs within vision's own 16 GPUs
    assert not fresh(jobs[2]).borrowing


def test_the_borrowing_limit_caps_what_a_team_borrows(alice: User, vision: Team) -> None:
    quota_set(actor=None, team=vision, resource=GPU, limit=16, borrowing_limit=4)
    jobs = [submit(alice, "vision", 4, name=f"j{i}", workers=2) for i in range(3)]
    result = admission_run(team_id=vision.pk)
    assert result.admitted == [jobs[0].pk, jobs[1].pk]
    assert fresh(jobs[2]).message == (
        "team vision uses 16 of 16 nvidia.com/gpu (nominal); would exceed vision's borrowing "
        "limit (4); 0 jobs ahead"
    )
    # and 4 more fit within it
    small = submit(alice, "vision", 4, name="small", priority="high")
    assert admission_run(team_id=vision.pk).admitted == [small.pk]
    assert fresh(small).borrowing


def test_the_lending_limit_caps_what_a_lender_gives(
    alice: User, vision: Team, robotics: Team
) -> None:
    quota_set(actor=None, team=robotics, resource=GPU, limit=8, lending_limit=2)
    two = submit(alice, "vision", 2, name="two", priority="high")
    jobs = [submit(alice, "vision", 8, name=f"j{i}") for i in range(2)]
    one = submit(alice, "vision", 1, name="one")
    result = admission_run(team_id=vision.pk)
    # 16 of its own and the 2 robotics lends; the next GPU would be robotics' guarded one
    assert result.admitted == [two.pk, jobs[0].pk, jobs[1].pk]
    assert fresh(one).message.startswith(
        "team vision uses 18 of 16 nvidia.com/gpu (nominal) and may borrow 0 more; "
        "the cohort research has 0 unused"
    )


def test_resources_are_borrowed_only_from_the_same_resource(alice: User, vision: Team) -> None:
    # robotics has no MIG quota: vision's MIG jobs stay within its own 8 slices
    jobs = [
        job_submit(
            user=alice,
            data=training_spec(
                name=f"m{i}", gpu={"count": 4, "sharing": "mig", "mig_profile": "1g.10gb"}
            ),
        )
        for i in range(3)
    ]
    result = admission_run(team_id=vision.pk)
    assert result.admitted == [jobs[0].pk, jobs[1].pk]
    assert fresh(jobs[2]).message == (
        "team vision uses 8 of 8 nvidia.com/mig-1g.10gb (nominal) and may borrow 0 more; "
        "the cohort research has 0 unused; 0 jobs ahead"
    )


def test_inference_uses_nominal_quota_unless_the_team_lets_it_borrow(
    alice: User, vision: Team
) -> None:
    fill = [submit(alice, "vision", 8, name=f"j{i}") for i in range(2)]
    serve = job_submit(user=alice, data=inference_spec(name="serve", gpu={"count": 1}, replicas=2))
    admission_run(team_id=vision.pk)
    assert fresh(serve).admitted_at is None
    assert fresh(serve).message == (
        "team vision uses 16 of 16 nvidia.com/gpu (nominal); inference deployments of vision "
        "run on nominal quota only (a platform admin can let them borrow); 0 jobs ahead"
    )
    # When a platform admin lets vision's inference borrow
    Team.objects.filter(pk=vision.pk).update(inference_may_borrow=True)
    assert admission_run(team_id=vision.pk).admitted == [serve.pk]
    assert fresh(serve).borrowing
    assert all(fresh(j).admitted_at for j in fill)


def test_a_workspace_uses_nominal_quota_and_is_reclaimed_only_if_its_team_lets_it_borrow(
    alice: User, dave: User, vision: Team, robotics: Team
) -> None:
    # Given vision's 16 GPUs in use, and robotics' 8 idle in the cohort
    fill = [submit(alice, "vision", 8, name=f"j{i}") for i in range(2)]
    lab = job_submit(
        user=alice, data=workspace_spec(name="lab", gpu={"count": 1}, cpu="1", memory="2Gi")
    )
    # When admission runs, Then the workspace waits for vision's own quota, saying why
    admission_run(team_id=vision.pk)
    assert fresh(lab).admitted_at is None
    assert fresh(lab).message == (
        "team vision uses 16 of 16 nvidia.com/gpu (nominal); workspaces of vision run on "
        "nominal quota only (a platform admin can let them borrow); 0 jobs ahead"
    )
    # When vision lets its workspaces borrow, Then it runs on robotics' idle GPUs...
    Team.objects.filter(pk=vision.pk).update(workspace_may_borrow=True)
    assert admission_run(team_id=vision.pk).admitted == [lab.pk]
    run_all(*fill, lab)
    assert fresh(lab).borrowing
    # ...and it is what a reclaim takes back when robotics needs its GPUs
    mine = submit(dave, "robotics", 8, name="mine")
    admission_run(team_id=robotics.pk)
    assert fresh(lab).evicted_at is not None and fresh(lab).state == JobState.QUEUED
    assert all(fresh(j).evicted_at is None for j in fill)
    assert fresh(mine).admitted_at is None  # until the workspace's pod is gone


def test_a_request_above_what_the_team_could_ever_hold_is_refused_at_submission(
    alice: User, vision: Team
) -> None:
    # 24 GPUs in reach (16 + robotics' 8): 32 can never run
    with pytest.raises(ApplicationError) as refused:
        submit(alice, "vision", 8, name="huge", workers=4)
    assert refused.value.field_errors["gpu.count"] == [
        "Team vision can hold at most 24 of nvidia.com/gpu (16 nominal and 8 it may borrow in "
        "cohort research); this job asks for 32 (8 × 4 pods), so it could never be admitted. "
        "Ask for less, or ask a platform admin for more quota."
    ]
    assert not Job.objects.filter(name="huge").exists()
    # 24 is fine
    assert submit(alice, "vision", 8, name="big", workers=3).pk


# --- fair share between borrowers -----------------------------------------------------------


def test_borrowers_take_turns_by_weighted_share(research: dict[str, Any]) -> None:
    # Given cohort lab: a lender with 12 idle GPUs, and two borrowers with 4 each, in use
    lab = Cohort.objects.create(slug="lab", name="Lab")
    users = {}
    for slug, nominal, weight in (("lender", 12, 1), ("heavy", 4, 2), ("light", 4, 1)):
        team = Team.objects.create(
            slug=slug, name=slug, namespace=f"team-{slug}", cohort=lab, weight=weight
        )
        GpuQuota.objects.create(team=team, resource=GPU, limit=nominal)
        users[slug] = User.objects.create_user(f"u-{slug}", password="pw-for-tests-1")
        Membership.objects.create(user=users[slug], team=team)
    for slug in ("heavy", "light"):
        submit(users[slug], slug, 4, name="own")
    admission_run(team_id=Team.objects.get(slug="heavy").pk)
    # When both queue six 2-GPU jobs to borrow the lender's 12
    for i in range(6):
        submit(users["light"], "light", 2, name=f"l{i}")
        submit(users["heavy"], "heavy", 2, name=f"h{i}")
    admission_run(team_id=Team.objects.get(slug="light").pk)
    # Then weight 2 borrows twice what weight 1 does: 8 and 4
    borrowed = {
        slug: sum(
            j.gpu_count for j in Job.objects.filter(team__slug=slug, admitted_at__isnull=False)
        )
        - 4
        for slug in ("heavy", "light")
    }
    assert borrowed == {"heavy": 8, "light": 4}


# --- reclaim and preemption -----------------------------------------------------------------


def test_a_lender_reclaims_from_the_fewest_lowest_priority_newest_borrowing_jobs(
    alice: User, dave: User, vision: Team, robotics: Team
) -> None:
    # Given vision running 16 GPUs of its own and borrowing robotics' 8 in four jobs
    own = [submit(alice, "vision", 8, name=f"own{i}", priority="high") for i in range(2)]
    borrowers = [
        submit(alice, "vision", 2, name="b-normal-old"),
        submit(alice, "vision", 2, name="b-normal-new"),
        submit(alice, "vision", 2, name="b-low-old", priority="low"),
        submit(alice, "vision", 2, name="b-low-new", priority="low"),
    ]
    admission_run(team_id=vision.pk)
    run_all(*own, *borrowers)
    assert all(fresh(b).borrowing for b in borrowers)
    # When dave submits 4 GPUs within robotics' nominal 8
    mine = submit(dave, "robotics", 4, name="reclaim")
    result = admission_run(team_id=robotics.pk)
    # Then the two low-priority borrowing jobs are evicted, and nothing else
    assert sorted(result.evicted) == sorted([borrowers[2].pk, borrowers[3].pk])
    assert result.admitted == []
    victim = fresh(borrowers[3])
    assert (victim.state, victim.reason, victim.evictions) == (JobState.QUEUED, "Preempted", 1)
    assert re.fullmatch(
        r"evicted at \d\d:\d\d: team robotics reclaimed 4 nvidia.com/gpu it had lent to "
        r"vision; re-queued, position 2",
        victim.message,
    ), victim.message
    # behind the other evicted job, submitted before it
    assert fresh(borrowers[2]).message.endswith("re-queued, position 1")
    assert victim.events.filter(reason="Preempted").count() == 1
    # and robotics' job waits for their GPUs, which stay counted until the pods are gone
    assert fresh(mine).admitted_at is None
    assert fresh(mine).message.startswith("Evicting 2 jobs (")
    assert admission_run(team_id=robotics.pk).evicted == []  # the next pass evicts no more
    assert "Waiting for 2 evicted jobs to stop" in fresh(mine).message
    assert all(fresh(j).state == JobState.RUNNING for j in [*own, *borrowers[:2]])


def test_a_reclaim_takes_the_lowest_priority_job_of_the_borrowing_team_not_the_flagged_one(
    alice: User, dave: User, vision: Team, robotics: Team
) -> None:
    # Given vision running a low, a normal and a high-priority 8-GPU job, the high one
    # admitted last and so the one flagged as borrowing robotics' idle 8
    low = submit(alice, "vision", 8, name="low", priority="low")
    normal = submit(alice, "vision", 8, name="normal")
    admission_run(team_id=vision.pk)
    run_all(low, normal)
    high = submit(alice, "vision", 8, name="high", priority="high")
    admission_run(team_id=vision.pk)
    run_all(high)
    assert [fresh(j).borrowing for j in (low, normal, high)] == [False, False, True]
    # When robotics reclaims its 8
    mine = submit(dave, "robotics", 8, name="reclaim")
    result = admission_run(team_id=robotics.pk)
    # Then, as Kueue does, every job of the team over its nominal quota is a candidate and
    # the lowest-priority one goes: one eviction, the high-priority job keeps running
    assert result.evicted == [low.pk]
    assert fresh(high).state == JobState.RUNNING and fresh(normal).state == JobState.RUNNING
    assert re.fullmatch(
        r"evicted at \d\d:\d\d: team robotics reclaimed 8 nvidia.com/gpu it had lent to "
        r"vision; re-queued, position 1",
        fresh(low).message,
    ), fresh(low).message
    # And once its pods are gone robotics runs, and vision evicts nobody of its own
    Job.objects.filter(pk=low.pk).update(evicted_at=None, applied_at=None, admitted_at=None)
    assert admission_run(team_id=robotics.pk).admitted == [mine.pk]
    assert admission_run(team_id=vision.pk).evicted == []
    assert Job.objects.filter(evictions__gt=0).count() == 1


def test_no_reclaim_from_a_team_within_its_nominal_quota(
    alice: User, dave: User, vision: Team, robotics: Team
) -> None:
    # Given robotics running 8 of its own, and vision its 16
    for i in range(2):
        submit(alice, "vision", 8, name=f"v{i}")
    own = submit(dave, "robotics", 8, name="r")
    admission_run(team_id=vision.pk)
    run_all(*Job.objects.all())
    # When vision queues more and admission runs
    extra = submit(alice, "vision", 2, name="more")
    result = admission_run(team_id=vision.pk)
    # Then nobody is evicted: vision's job would borrow, and robotics is within nominal
    assert result.evicted == []
    assert fresh(own).state == JobState.RUNNING
    assert fresh(extra).message == (
        "team vision uses 16 of 16 nvidia.com/gpu (nominal) and may borrow 8 more; the cohort "
        "research has 0 unused: robotics uses 8 of its 8; 0 jobs ahead"
    )


def test_a_higher_priority_job_preempts_its_own_teams_lower_priority_jobs(
    alice: User, vision: Team
) -> None:
    # Given vision outside any cohort, full with two normal jobs
    Team.objects.filter(pk=vision.pk).update(cohort=None)
    normal = [submit(alice, "vision", 8, name=f"n{i}") for i in range(2)]
    admission_run(team_id=vision.pk)
    run_all(*normal)
    # When a high-priority 8-GPU job arrives
    urgent = submit(alice, "vision", 8, name="urgent", priority="high")
    result = admission_run(team_id=vision.pk)
    # Then the newer normal job is evicted for it
    assert result.evicted == [normal[1].pk]
    assert re.fullmatch(
        rf"evicted at \d\d:\d\d: job #{urgent.pk} of priority gpu-high needed 8 "
        r"nvidia.com/gpu of team vision's quota; re-queued, position 2",
        fresh(normal[1]).message,
    ), fresh(normal[1]).message


def test_gpu_low_never_preempts(alice: User, vision: Team) -> None:
    Team.objects.filter(pk=vision.pk).update(cohort=None)
    # The lowest class cannot preempt even lower: give the running jobs no priority at all
    running = [submit(alice, "vision", 8, name=f"r{i}", priority="low") for i in range(2)]
    admission_run(team_id=vision.pk)
    run_all(*running)
    Job.objects.filter(pk__in=[j.pk for j in running]).update(priority_value=0)
    low = submit(alice, "vision", 8, name="low", priority="low")
    assert admission_run(team_id=vision.pk).evicted == []
    assert fresh(low).message == "team vision uses 16 of 16 nvidia.com/gpu; 0 jobs ahead"


def test_equal_priority_never_preempts(alice: User, vision: Team) -> None:
    Team.objects.filter(pk=vision.pk).update(cohort=None)
    running = [submit(alice, "vision", 8, name=f"r{i}") for i in range(2)]
    admission_run(team_id=vision.pk)
    run_all(*running)
    same = submit(alice, "vision", 8, name="same")
    assert admission_run(team_id=vision.pk).evicted == []
    assert fresh(same).admitted_at is None
