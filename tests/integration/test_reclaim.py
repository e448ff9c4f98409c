"""Borrowed GPUs are given back: a lender's job evicts borrowing jobs from a real sandbox
cluster through a real Celery worker, runs, and the evicted jobs come back on their own;
a cancel wins over an eviction and a re-admission under way.

The sandbox (profile ``small``: two 8-GPU A100 nodes) runs 30× faster than real time.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from cluster import kube
from cluster.labels import JOB_ID_LABEL, MANAGED_BY_SELECTOR
from jobs.models import Job, JobState
from jobs.services.admission import admission_run
from jobs.services.eviction import EvictOutcome, job_evict
from jobs.services.submit import job_submit
from teams.models import Team
from teams.services import quota_set
from tests.conftest import api_client_for, training_spec
from tests.sandbox_process import SandboxProcess
from tests.worker_process import WorkerProcess, wait_for, wait_job

pytestmark = pytest.mark.django_db(transaction=True)

GPU = "nvidia.com/gpu"
LONG = {"SANDBOX_DURATION": "3600s"}  # two minutes of real time


def seed(vision: int, robotics: int) -> dict[str, User]:
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    teams = {t.slug: t for t in Team.objects.all()}
    quota_set(actor=None, team=teams["vision"], resource=GPU, limit=vision)
    quota_set(actor=None, team=teams["robotics"], resource=GPU, limit=robotics)
    return {u.username: u for u in User.objects.all()}


def submit(user: User, team: str, gpus: int, name: str, **extra: Any) -> Job:
    return job_submit(
        user=user, data=training_spec(team=team, name=name, gpu={"count": gpus}, **extra)
    )


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def objects_per_job() -> collections.Counter[int]:
    """How many Jobs and pods of each portal job the cluster has now."""
    seen: collections.Counter[int] = collections.Counter()
    for kind in ("Job", "Pod"):
        for obj in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR):
            job_id = obj["metadata"]["labels"].get(JOB_ID_LABEL)
            if job_id and obj["metadata"].get("deletionTimestamp") is None:
                seen[int(job_id)] += 1
    return seen


def test_a_lender_reclaims_its_gpus_and_the_evicted_job_runs_again_later(
    worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    # Given vision (6 GPUs) borrowing 4 of idle robotics' 4 in cohort research
    users = seed(vision=6, robotics=4)
    alice, dave = users["alice"], users["dave"]
    own = submit(alice, "vision", 6, "own", env=LONG)
    keep = submit(alice, "vision", 2, "keep", env=LONG)
    victim = submit(alice, "vision", 2, "victim", env=LONG, priority="low")
    for job in (own, keep, victim):
        wait_for(lambda job=job: fresh(job).state == JobState.RUNNING, timeout=40)
    assert [fresh(j).borrowing for j in (own, keep, victim)] == [False, True, True]
    first_uid = next(
        o["metadata"]["uid"]
        for o in kube.list_all("Job", label_selector=f"{JOB_ID_LABEL}={victim.pk}")
    )

    # When dave submits 2 GPUs of robotics' own quota
    mine = submit(dave, "robotics", 2, "mine", env={"SANDBOX_DURATION": "90s"})
    samples = []

    def reclaimed() -> bool:
        samples.append(objects_per_job())
        return fresh(mine).state in (JobState.RUNNING, JobState.SUCCEEDED)

    wait_for(reclaimed, timeout=40)

    # Then only the low-priority borrowing job was evicted from the cluster
    evicted = fresh(victim)
    assert evicted.evictions == 1
    assert evicted.state in (JobState.QUEUED, JobState.PENDING, JobState.RUNNING)
    assert fresh(own).state == fresh(keep).state == JobState.RUNNING
    assert fresh(own).evictions == fresh(keep).evictions == 0
    preempted = evicted.events.get(reason="Preempted")
    assert "team robotics reclaimed 2 nvidia.com/gpu it had lent to vision" in preempted.message
    # and never more than one Job and one pod of any job existed at once
    assert all(count <= 2 for sample in samples for count in sample.values()), samples

    # When robotics' job is done, the evicted job is admitted and runs again by itself
    wait_for(lambda: fresh(mine).state == JobState.SUCCEEDED, timeout=40)
    back = wait_for(lambda: (j := fresh(victim)).state == JobState.RUNNING and j, timeout=40)
    assert back.evictions == 1 and back.borrowing
    reasons = list(back.events.values_list("reason", flat=True))
    assert reasons.count("Preempted") == 1
    assert reasons.count("Requeued") == 1
    assert reasons.count("Admitted") == 2 and reasons.count("Applied") == 2
    again = [
        o["metadata"]["uid"]
        for o in kube.list_all("Job", label_selector=f"{JOB_ID_LABEL}={victim.pk}")
    ]
    assert len(again) == 1 and again[0] != first_uid  # created anew, exactly once


def settle(rounds: int = 8) -> list[int]:
    """Admission for every team of cohort research, then every eviction finished,
    ``rounds`` times (what the workers do, minus the cluster's pods: these jobs were never
    applied). Returns how many jobs each round evicted."""
    teams = list(Team.objects.filter(cohort__slug="research").order_by("slug"))
    evictions = []
    for _ in range(rounds):
        evicted = [job for team in teams for job in admission_run(team_id=team.pk).evicted]
        for job_id in Job.objects.filter(evicted_at__isnull=False).values_list("pk", flat=True):
            assert job_evict(job_id=job_id) is EvictOutcome.REQUEUED
        Job.objects.filter(state=JobState.QUEUED, admitted_at__isnull=False).update(
            state=JobState.RUNNING
        )
        evictions.append(len(evicted))
    return evictions


def test_teams_that_all_want_more_than_their_share_settle(cluster: SandboxProcess) -> None:
    # Given cohort research of vision, robotics and speech, 8 GPUs each, speech idle
    users = seed(vision=8, robotics=8)
    speech = Team.objects.get(slug="speech")
    speech.cohort = Team.objects.get(slug="vision").cohort
    speech.save()
    quota_set(actor=None, team=speech, resource=GPU, limit=8)
    carol = User.objects.create_user("speaker", password="pw-for-tests-1")
    speech.memberships.create(user=carol)
    # vision runs 8 of its own and borrows speech's 8; robotics runs its 8
    vision_jobs = [submit(users["alice"], "vision", 8, f"v{i}") for i in range(2)]
    robotics_jobs = [submit(users["dave"], "robotics", 8, "r0")]
    assert settle(rounds=1) == [0]
    assert fresh(vision_jobs[1]).borrowing
    # When robotics wants to borrow too, and then speech wants its GPUs back
    robotics_jobs.append(submit(users["dave"], "robotics", 8, "r1"))
    assert settle(rounds=3) == [0, 0, 0]  # a job that would borrow never evicts
    speech_job = submit(carol, "speech", 8, "s0")
    evictions = settle()

    # Then speech reclaimed its 8 once, and nothing moved after that
    assert evictions[0] == 1 and sum(evictions) == 1, evictions
    assert fresh(speech_job).state == JobState.RUNNING
    assert fresh(vision_jobs[1]).evictions == 1
    assert fresh(vision_jobs[1]).admitted_at is None  # waits to borrow again
    assert fresh(robotics_jobs[1]).admitted_at is None
    assert fresh(robotics_jobs[1]).message.startswith(
        "team robotics uses 8 of 8 nvidia.com/gpu (nominal) and may borrow 16 more; "
        "the cohort research has 0 unused: speech uses 8 of its 8, vision uses 8 of its 8"
    )


@pytest.mark.parametrize("moment", ["while-evicting", "once-requeued"])
def test_a_cancel_wins_over_the_eviction_and_readmission_of_the_job(
    worker: WorkerProcess, cluster: SandboxProcess, moment: str
) -> None:
    # Given vision (4 GPUs) running three 2-GPU jobs in cohort research, borrowing 2 of
    # idle robotics' 2
    users = seed(vision=4, robotics=2)
    alice, dave = users["alice"], users["dave"]
    low = submit(alice, "vision", 2, "vo-low", env=LONG, priority="low")
    normal = submit(alice, "vision", 2, "vo-normal", env=LONG)
    high = submit(alice, "vision", 2, "vo-high", env=LONG, priority="high")
    for job in (low, normal, high):
        wait_job(job, JobState.RUNNING, timeout=60)
    # When robotics reclaims its 2 GPUs, vo-low is evicted...
    submit(dave, "robotics", 2, "reclaim", env=LONG)
    if moment == "while-evicting":
        wait_for(lambda: fresh(low).evicted_at is not None, timeout=30, interval=0.05)
    else:
        wait_for(lambda: (j := fresh(low)).evictions == 1 and j.evicted_at is None, timeout=60)
    # ...and alice cancels all three through the API within a second, vo-low last (the
    # others' cancels free the quota that admits it again meanwhile)
    api = api_client_for(alice)
    for job in (high, normal, low):
        assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    # Then every one of them ends cancelled, and stays so with nothing left in the cluster
    for job in (high, normal, low):
        wait_job(job, JobState.CANCELLED, timeout=60)
    vision_jobs = {low.pk, normal.pk, high.pk}
    wait_for(lambda: not vision_jobs & set(objects_per_job()), timeout=60)
    for _ in range(10):  # the worker's reconcile, admission and apply run every second
        time.sleep(1)
        assert {fresh(j).state for j in (low, normal, high)} == {JobState.CANCELLED}
        assert not vision_jobs & set(objects_per_job())
