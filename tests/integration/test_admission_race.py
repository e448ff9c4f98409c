"""Quota admission is race-free on PostgreSQL under real concurrent transactions."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from cluster.models import CatalogSettings, GpuProduct
from jobs.models import Job
from jobs.services.admission import admission_run
from jobs.services.submit import job_submit
from teams.models import Cohort, GpuQuota, Membership, Team
from tests.conftest import training_spec
from tests.worker_process import redis_reset

pytestmark = pytest.mark.django_db(transaction=True)

SUBMISSIONS = 100
THREADS = 40  # PostgreSQL allows 100 connections; leave room for the test's own
ADMISSION_ROUNDS = 3  # each thread also re-runs admission, as racing workers would


def test_concurrent_submissions_never_admit_more_than_the_quota() -> None:
    # Given a team with a quota of 8 GPUs
    GpuProduct.objects.create(name="NVIDIA-A100-SXM4-80GB", memory_mib=81920, gpus_per_node=8)
    CatalogSettings.objects.create()
    team = Team.objects.create(name="Race", slug="race", namespace="team-race")
    GpuQuota.objects.create(team=team, resource="nvidia.com/gpu", limit=8)
    user = User.objects.create_user("racer", password="pw-for-tests-1")
    Membership.objects.create(user=user, team=team)
    start = threading.Event()
    lock = threading.Lock()
    stored_by: dict[int, float] = {}  # job id → when job_submit returned (committed by then)
    runs: list[tuple[float, list[int]]] = []  # (when an admission run began, what it admitted)

    def submit_and_admit(i: int) -> None:
        start.wait()
        try:
            job = job_submit(
                user=user, data=training_spec(team="race", name=f"r{i}", gpu={"count": 1})
            )
            with lock:
                stored_by[job.pk] = time.monotonic()
            for _ in range(ADMISSION_ROUNDS):
                began = time.monotonic()
                result = admission_run(team_id=team.pk)
                with lock:
                    runs.append((began, result.admitted))
        finally:
            connection.close()

    # When 100 submissions and admissions race each other from 40 connections
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        futures = [pool.submit(submit_and_admit, i) for i in range(SUBMISSIONS)]
        start.set()
        for future in futures:
            future.result()

    # Then exactly 8 GPUs are admitted, and every other job waits with a reason
    admitted = Job.objects.filter(team=team, admitted_at__isnull=False)
    assert Job.objects.filter(team=team).count() == SUBMISSIONS
    assert sum(j.demand["nvidia.com/gpu"] for j in admitted) == 8
    waiting = Job.objects.filter(team=team, admitted_at__isnull=True)
    assert waiting.count() == SUBMISSIONS - 8
    assert all(j.reason == "QuotaExceeded" for j in waiting)
    # And admission is FIFO within one priority: no run admitted a job ahead of an earlier
    # one that was already stored when the run began. (Two submits racing to commit have
    # no order a run can see: the one stored first may be the one created second.)
    order = {j.pk: (j.created_at, j.pk) for j in Job.objects.filter(team=team)}
    admitted_ids = {j.pk for j in admitted}
    assert sum(len(ids) for _, ids in runs) == 8
    for began, ids in runs:
        for job_id in ids:
            passed_over = [
                earlier
                for earlier, stored in stored_by.items()
                if stored < began and order[earlier] < order[job_id] and earlier not in admitted_ids
            ]
            assert passed_over == [], f"job {job_id} admitted ahead of {passed_over}"
    redis_reset(settings.REDIS_URL)  # the admission tasks nobody consumed


def test_admission_waits_for_a_concurrent_admission_of_the_same_team() -> None:
    # The 100-submission test above shows the outcome; this one pins down the mechanism:
    # a second admission cannot read the team's usage while another holds the team lock,
    # so it never decides on a stale view.
    team = Team.objects.create(name="Lock", slug="lock", namespace="team-lock")
    locked, release = threading.Event(), threading.Event()
    order: list[str] = []

    def hold_team_lock() -> None:
        try:
            with transaction.atomic():
                Team.objects.select_for_update().get(pk=team.pk)
                locked.set()
                release.wait(timeout=10)
                order.append("first admission committed")
        finally:
            connection.close()

    holder = threading.Thread(target=hold_team_lock)
    holder.start()
    assert locked.wait(timeout=10)

    def second_admission() -> None:
        try:
            admission_run(team_id=team.pk)
            order.append("second admission done")
        finally:
            connection.close()

    second = threading.Thread(target=second_admission)
    second.start()
    second.join(timeout=1)
    release.set()
    holder.join(timeout=10)
    second.join(timeout=10)

    assert order == ["first admission committed", "second admission done"]


def test_concurrent_submissions_across_a_cohort_never_exceed_any_limit() -> None:
    # Given cohort lab: team a (nominal 8, may borrow 4) and team b (nominal 8, may borrow 2)
    GpuProduct.objects.create(name="NVIDIA-A100-SXM4-80GB", memory_mib=81920, gpus_per_node=8)
    CatalogSettings.objects.create()
    lab = Cohort.objects.create(slug="lab", name="Lab")
    users, teams = {}, {}
    for slug, borrowing_limit in (("a", 4), ("b", 2)):
        teams[slug] = Team.objects.create(
            name=slug, slug=slug, namespace=f"team-{slug}", cohort=lab
        )
        GpuQuota.objects.create(
            team=teams[slug], resource="nvidia.com/gpu", limit=8, borrowing_limit=borrowing_limit
        )
        users[slug] = User.objects.create_user(f"racer-{slug}", password="pw-for-tests-1")
        Membership.objects.create(user=users[slug], team=teams[slug])
    start = threading.Event()

    def submit_and_admit(i: int) -> None:
        slug = "ab"[i % 2]
        start.wait()
        try:
            job_submit(
                user=users[slug],
                data=training_spec(team=slug, name=f"r{i}", gpu={"count": 1 + i % 3}),
            )
            for round_ in range(ADMISSION_ROUNDS):
                admission_run(team_id=teams["ab"[(i + round_) % 2]].pk)
        finally:
            connection.close()

    # When 100 submissions and admission runs for both teams race each other
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        futures = [pool.submit(submit_and_admit, i) for i in range(SUBMISSIONS)]
        start.set()
        for future in futures:
            future.result()

    # Then what the jobs hold (evicted ones too, until their pods are gone) never passes a
    # team's nominal + borrowing limit, nor the cohort's 16
    held = {
        slug: sum(
            j.demand["nvidia.com/gpu"]
            for j in Job.objects.filter(team=team, admitted_at__isnull=False)
        )
        for slug, team in teams.items()
    }
    assert held["a"] <= 12 and held["b"] <= 10, held
    assert held["a"] + held["b"] <= 16, held
    # and the cohort is used: a queue that can move has moved
    assert held["a"] + held["b"] >= 14, held
    redis_reset(settings.REDIS_URL)


def test_admission_for_one_team_waits_for_a_pass_over_another_team_of_its_cohort() -> None:
    # The mechanism behind the test above: a pass locks every team of the cohort, so a
    # pass started for team a cannot decide while one for team b (same GPUs to lend)
    # holds the cohort.
    lab = Cohort.objects.create(slug="lab", name="Lab")
    a = Team.objects.create(name="A", slug="a", namespace="team-a", cohort=lab)
    b = Team.objects.create(name="B", slug="b", namespace="team-b", cohort=lab)
    outsider = Team.objects.create(name="C", slug="c", namespace="team-c")
    locked, release = threading.Event(), threading.Event()
    order: list[str] = []

    def hold_team_b() -> None:
        try:
            with transaction.atomic():
                Team.objects.select_for_update().get(pk=b.pk)
                locked.set()
                release.wait(timeout=10)
                order.append("pass over b committed")
        finally:
            connection.close()

    def admit(team: Team, what: str) -> None:
        try:
            admission_run(team_id=team.pk)
            order.append(what)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_team_b)
    holder.start()
    assert locked.wait(timeout=10)
    other = threading.Thread(target=admit, args=(outsider, "pass over c (no cohort) done"))
    other.start()
    other.join(timeout=5)
    second = threading.Thread(target=admit, args=(a, "pass over a done"))
    second.start()
    second.join(timeout=1)
    release.set()
    holder.join(timeout=10)
    second.join(timeout=10)

    assert order == [
        "pass over c (no cohort) done",
        "pass over b committed",
        "pass over a done",
    ]
