"""The portal on the cluster's Kueue (QUEUEING=kueue, managed): cluster_sync writes Kueue's
configuration, jobs go to the cluster suspended and Kueue admits them, borrowing idle
quota; a lender reclaims through Kueue's preemption, and the portal shows what Kueue did in
its own words: the waiting reason, the eviction (counted), the run again.

Real processes: PostgreSQL, Redis, a Celery worker with beat's reconcile, and the real
control plane with the real Kueue (profile ``small``: two simulated 8-GPU A100 nodes, their
work at 30× real time).
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from cluster import kube
from cluster.labels import JOB_ID_LABEL, MANAGED_BY_SELECTOR
from core.redis_client import redis_client
from jobs.models import Job, JobState
from jobs.selectors.queue_position import job_queue_position
from jobs.services.apply import ApplyOutcome, job_apply
from jobs.services.submit import job_cancel, job_submit
from jobs.tracking.reconcile import cluster_reconcile
from teams.kueue_config import SYNC_LOCK, kueue_managed_sync
from teams.models import Team
from tests.conftest import api_client_for, workspace_spec
from tests.integration.conftest import empty_tables
from tests.integration.test_reclaim import GPU, LONG, fresh, seed, submit
from tests.sandbox_process import SandboxProcess
from tests.worker_process import WorkerProcess, wait_for
from workspaces.services import workspace_start, workspace_stop

pytestmark = pytest.mark.django_db(transaction=True)
# Its own cluster: the Kueue scenarios rewrite every ClusterQueue and cohort as they go.
OWN_CLUSTER = True

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture(scope="module")
def worker_overrides() -> dict[str, str]:
    return {"QUEUEING": "kueue"}


@pytest.fixture
def kueue_worker(worker: WorkerProcess, settings: Any) -> Iterator[WorkerProcess]:
    """The worker, and this process, on the cluster's Kueue; Kueue's objects removed after
    (once the tables the worker would write them from are empty)."""
    settings.QUEUEING = "kueue"
    yield worker
    empty_tables()
    for kind in ("LocalQueue", "ClusterQueue", "ResourceFlavor"):
        for obj in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR):
            meta = obj["metadata"]
            kube.delete(kind, meta["name"], meta.get("namespace"))


def jobs_per_portal_job() -> collections.Counter[int]:
    """How many Job objects of each portal job the cluster has now."""
    seen: collections.Counter[int] = collections.Counter()
    for obj in kube.list_all("Job", label_selector=MANAGED_BY_SELECTOR):
        seen[int(obj["metadata"]["labels"][JOB_ID_LABEL])] += 1
    return seen


def cluster_job(job: Job) -> dict[str, Any]:
    (found,) = kube.list_all("Job", label_selector=f"{JOB_ID_LABEL}={job.pk}")
    return found


def test_cluster_sync_writes_kueue_configuration_from_the_teams(
    kueue_worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    # Given vision (6 GPUs) and robotics (4) in cohort research, Kueue managed by the portal
    seed(vision=6, robotics=4)
    # When an admin runs cluster_sync
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    # Then each team has a ClusterQueue in the cohort with its nominal GPUs, and a LocalQueue
    queues = {q["metadata"]["name"]: q for q in kube.list_all("ClusterQueue")}
    assert {"vision", "robotics"} <= set(queues)
    vision = queues["vision"]["spec"]
    assert vision["cohortName"] == "research"
    gpu = [
        r
        for group in vision["resourceGroups"]
        for flavor in group["flavors"]
        for r in flavor["resources"]
        if r["name"] == GPU
    ]
    assert gpu and gpu[0]["nominalQuota"] in (6, "6")
    local = kube.get("LocalQueue", "gpu-portal", "team-vision")
    assert local["spec"]["clusterQueue"] == "vision"


def test_a_sync_waits_for_the_one_writing_then_writes_the_teams_as_they_are_now(
    kueue_worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    # Given another Kueue sync holding the sync's lock, and vision joining cohort research
    # with 6 GPUs (the worker's syncs of that change wait for the lock too)
    # (taken once the worker's own sync, if one is running, has let it go)
    held = redis_client().lock(SYNC_LOCK, timeout=30)
    assert held.acquire(blocking=True, blocking_timeout=30)
    outcome: list[dict[str, str]] = []

    def sync() -> None:
        try:
            outcome.append(kueue_managed_sync())
        finally:
            connection.close()

    thread = threading.Thread(target=sync)
    try:
        seed(vision=6, robotics=4)
        # When a sync starts, and vision leaves the cohort while it waits
        thread.start()
        time.sleep(1.0)
        assert thread.is_alive(), "the sync did not wait for the one holding the lock"
        Team.objects.filter(slug="vision").update(cohort=None)
    finally:
        held.release()
    thread.join(timeout=30)
    # Then what it wrote is vision as it is once the lock was free: out of the cohort, so
    # borrowing nothing (a sync that had read before waiting put it back in the cohort)
    assert outcome and outcome[0]
    vision = wait_for(lambda: kube.get("ClusterQueue", "vision"), timeout=10)
    assert "cohortName" not in vision["spec"], vision["spec"]


def assert_page_names_its_kueue_objects(user: Any, job: Job, kueue: dict[str, str]) -> None:
    assert kueue["local_queue"] == "gpu-portal" and kueue["cluster_queue"] == "vision"
    assert kueue["workload"].startswith(f"job-{job.object_name}-")
    client = Client()
    client.force_login(user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"team-vision/{kueue['workload']}" in page and "ClusterQueue <code>vision" in page


def running_again(job: Job) -> Job:
    """The job once it runs again (up to 90 s on a loaded machine); on a failure, what Kueue
    says of the team's Workloads, the first thing to read."""
    try:
        found: Job = wait_for(lambda: (j := fresh(job)).state == JobState.RUNNING and j, timeout=90)
    except AssertionError:
        print(f"--- job: {fresh(job).__dict__}")
        print(f"--- workloads: {list(kube.list_all('Workload', namespace=job.namespace))}")
        raise
    return found


def waits_in_kueue_then_cancelled(alice: Any, extra: Job) -> None:
    """The job waits in Kueue's queue, saying for what in plain words (Kueue's beside), at
    Kueue's place; then it is cancelled."""
    waiting = wait_for(lambda: (j := fresh(extra)).reason == "QuotaExceeded" and j, timeout=30)
    assert waiting.state == JobState.QUEUED
    # ...in the portal engine's own sentence, Kueue's after it
    assert waiting.message.startswith(
        "team vision uses 10 of 6 nvidia.com/gpu (nominal) and may borrow 0 more; the cohort "
        "research has 0 unused: robotics uses 0 of its 4; 0 jobs ahead (Kueue: couldn't "
        "assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu"
    )
    # ...and its place in the team's queue is the one Kueue's visibility API gives
    pending = kube.pending_workloads("team-vision", "gpu-portal")
    assert [p["metadata"]["ownerReferences"][0]["name"] for p in pending] == [extra.object_name]
    shown = wait_for(
        lambda: api_client_for(alice).get(f"/api/v1/jobs/{extra.pk}/").json()["queue_position"],
        timeout=10,
    )
    assert shown["team"] == pending[0]["positionInClusterQueue"] + 1 == 1
    # (cancelled: which of two waiting jobs Kueue takes first is its requeuing strategy's
    # business, not this test's)
    job_cancel(user=alice, job_id=extra.pk)
    wait_for(lambda: not kube.pending_workloads("team-vision", "gpu-portal"), timeout=30)


# The reclaiming job's run: long enough (15 s of real time) that Kueue has not admitted its
# victim again when the eviction is read (at 3 s it could have, on a loaded machine).
RECLAIMER_RUN = {"SANDBOX_DURATION": "450s"}


def test_on_kueue_a_lender_reclaims_and_the_evicted_job_runs_again(
    kueue_worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    # Given vision (6 GPUs) borrowing 4 of idle robotics' 4 through Kueue
    users = seed(vision=6, robotics=4)
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    alice, dave = users["alice"], users["dave"]
    own = submit(alice, "vision", 6, "own", env=LONG)
    keep = submit(alice, "vision", 2, "keep", env=LONG)
    victim = submit(alice, "vision", 2, "victim", env=LONG, priority="low")
    for job in (own, keep, victim):
        wait_for(lambda job=job: fresh(job).state == JobState.RUNNING, timeout=60)
    # ...each a Job in vision's LocalQueue, admitted by Kueue, never by the portal's engine
    for job in (own, keep, victim):
        labels = cluster_job(job)["metadata"]["labels"]
        assert labels[QUEUE_LABEL] == "gpu-portal"
        row = fresh(job)
        assert row.queueing == "kueue" and row.admitted_at is not None

    # ...the portal's borrowing badge on the jobs past vision's nominal 6 (in the order Kueue
    # admitted them, which the order the worker applied them decides)
    def borrowers() -> set[int]:
        return {j.pk for j in (own, keep, victim) if fresh(j).borrowing}

    def nominal_holds_at_most_6() -> set[int] | None:
        # The tracker flags each borrower as it sees its Workload: wait until it has seen
        # them all (every running job not flagged fits in vision's nominal 6).
        flagged = borrowers()
        held = sum(fresh(j).gpu_count for j in (own, keep, victim) if j.pk not in flagged)
        return flagged if flagged and held <= 6 else None

    flagged = wait_for(nominal_holds_at_most_6, timeout=30)
    assert sum(fresh(j).gpu_count for j in (own, keep, victim) if j.pk not in flagged) <= 6
    first_uid = cluster_job(victim)["metadata"]["uid"]
    api = api_client_for(alice).get(f"/api/v1/jobs/{own.pk}/").json()
    assert api["queueing"] == "kueue" and api["state"] == "running"
    # ...and its page names the Kueue objects it is in
    assert_page_names_its_kueue_objects(alice, own, api["placement"]["kueue"])

    # When alice submits 2 more GPUs the cohort no longer has
    extra = submit(alice, "vision", 2, "extra", env=LONG, priority="low")
    # Then it waits in Kueue's queue, saying for what, at the place Kueue gives it
    waits_in_kueue_then_cancelled(alice, extra)

    # When dave submits 2 GPUs of robotics' own quota
    mine = submit(dave, "robotics", 2, "mine", env=RECLAIMER_RUN)
    samples = []

    def reclaimed() -> bool:
        samples.append(jobs_per_portal_job())
        return fresh(mine).state in (JobState.RUNNING, JobState.SUCCEEDED)

    wait_for(reclaimed, timeout=60)

    # Then Kueue evicted the low-priority borrowing job only, and the portal shows it
    evicted = wait_for(lambda: (j := fresh(victim)).evictions == 1 and j, timeout=30)
    assert evicted.state == JobState.QUEUED and evicted.reason == "Preempted"
    # ...in the words the portal's engine uses for a reclaim, Kueue's after them
    assert re.fullmatch(
        r"evicted at \d\d:\d\d: team robotics reclaimed 2 nvidia.com/gpu it had lent to "
        r"vision; re-queued, position 1 \(Kueue: Preempted to accommodate a workload \(UID: "
        r".*due to reclamation within the cohort; .*\)",
        evicted.message,
    ), evicted.message
    assert cluster_job(victim)["spec"]["suspend"] is True
    assert fresh(own).state == fresh(keep).state == JobState.RUNNING
    assert fresh(own).evictions == fresh(keep).evictions == 0
    # (one eviction on the timeline in the portal's words, whatever Kueue's own events say)
    assert evicted.events.filter(reason="Preempted", source="portal").count() == 1
    # ...and no portal job ever had more than one Job object
    assert all(count == 1 for sample in samples for count in sample.values()), samples

    # When robotics' job is done, Kueue admits the evicted job again and it runs by itself,
    # the same Job object unsuspended (Kueue suspends, it does not delete)
    wait_for(lambda: fresh(mine).state == JobState.SUCCEEDED, timeout=60)
    back = running_again(victim)
    assert back.evictions == 1
    wait_for(lambda: fresh(victim).borrowing, timeout=30)  # admitted last, on lent quota
    assert len(back.earlier_runs) == 1  # the GPU-hours of the run Kueue ended stay counted
    assert cluster_job(victim)["metadata"]["uid"] == first_uid


def test_on_kueue_a_reclaim_evicts_the_lowest_priority_job_not_the_one_flagged_borrowing(
    kueue_worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    # Given vision (8 GPUs) running a low- and a normal-priority job of 4 GPUs, then a
    # high-priority one admitted last, on quota idle robotics (8) lends: the one flagged
    # borrowing
    users = seed(vision=8, robotics=8)
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    alice, dave = users["alice"], users["dave"]
    low = submit(alice, "vision", 4, "low", env=LONG, priority="low")
    normal = submit(alice, "vision", 4, "normal", env=LONG)
    for job in (low, normal):
        wait_for(lambda job=job: fresh(job).state == JobState.RUNNING, timeout=60)
    high = submit(alice, "vision", 4, "high", env=LONG, priority="high")
    wait_for(lambda: fresh(high).state == JobState.RUNNING, timeout=60)
    wait_for(lambda: fresh(high).borrowing, timeout=30)

    # When robotics needs all of its 8 GPUs back (two workers of 4)
    mine = submit(dave, "robotics", 4, "mine", env=LONG, workers=2)
    wait_for(lambda: fresh(mine).state == JobState.RUNNING, timeout=60)

    # Then Kueue evicted the low-priority job, once, and nothing else: the high-priority
    # job keeps running and evicts no one of its own team
    wait_for(lambda: fresh(low).evictions == 1, timeout=30)
    assert fresh(low).state == JobState.QUEUED
    assert [fresh(j).evictions for j in (normal, high)] == [0, 0]
    assert fresh(normal).state == fresh(high).state == JobState.RUNNING


def test_a_queued_jobs_place_is_kueues_not_the_portals(
    cluster: SandboxProcess, settings: Any
) -> None:
    # Given Kueue, vision's quota and all it may borrow taken by two jobs: 6 GPUs for at
    # most an hour, 4 for at most two
    settings.QUEUEING = "kueue"
    users = seed(vision=6, robotics=4)
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    alice = users["alice"]
    hour = submit(alice, "vision", 6, "hour", env=LONG, max_runtime_seconds=3600)
    two_hours = submit(alice, "vision", 4, "two-hours", env=LONG, max_runtime_seconds=7200)
    # ...and two jobs submitted first and second, that reached Kueue the other way round
    first = submit(alice, "vision", 2, "first", env=LONG)
    second = submit(alice, "vision", 2, "second", env=LONG)
    for job in (hour, two_hours, second, first):
        assert job_apply(job_id=job.pk) is ApplyOutcome.APPLIED
        time.sleep(1.1)  # Kueue orders by creation time, to the second

    def placed() -> bool:
        cluster_reconcile()
        rows = [fresh(j) for j in (first, second)]
        return (
            all(fresh(j).started_at for j in (hour, two_hours))
            and all((r.placement or {}).get("kueue") for r in rows)
            and all(r.reason == "QuotaExceeded" for r in rows)
        )

    wait_for(placed, timeout=60)
    # Then each one's place in the team's queue is where Kueue has it, and so is its start
    # estimate: the second job, first in Kueue's queue, starts when the hour's 6 GPUs free;
    # the first, behind it, needs the two-hour job's GPUs too
    ahead, behind = job_queue_position(job=fresh(second)), job_queue_position(job=fresh(first))
    assert ahead is not None and behind is not None
    assert (ahead.team, behind.team) == (1, 2)
    assert ahead.estimated_start == fresh(hour).started_at + timedelta(hours=1)
    assert behind.estimated_start == fresh(two_hours).started_at + timedelta(hours=2)
    for kind in ("LocalQueue", "ClusterQueue", "ResourceFlavor"):
        for obj in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR):
            kube.delete(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))


PLATFORMS_QUEUES: list[dict[str, Any]] = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "platform-gpus"},
        "spec": {"tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "platform-vision"},
        "spec": {
            "namespaceSelector": {},
            "cohortName": "ml-platform",
            "fairSharing": {"weight": "2"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [
                        {
                            "name": "platform-gpus",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "256Gi"},
                                {"name": GPU, "nominalQuota": "6", "borrowingLimit": "2"},
                            ],
                        }
                    ],
                }
            ],
        },
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "research-gpus", "namespace": "team-vision"},
        "spec": {"clusterQueue": "platform-vision"},
    },
]


def test_external_kueue_is_read_never_written(
    worker_env: dict[str, str], tmp_path: Path, settings: Any, cluster: SandboxProcess
) -> None:
    # Given Kueue run by the platform team: its own flavor, ClusterQueue and LocalQueue
    settings.QUEUEING, settings.KUEUE_MANAGED = "kueue", False
    env = {**worker_env, "QUEUEING": "kueue", "KUEUE_MANAGED": "false"}
    worker = WorkerProcess(tmp_path / "worker", env).start()
    users = seed(vision=1, robotics=1)
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    for obj in PLATFORMS_QUEUES:
        kube.create(obj)
    try:

        def as_written() -> list[Any]:
            """The platform team's objects as written (Kueue's own status aside)."""
            return [
                (found["spec"], found["metadata"].get("labels"))
                for o in PLATFORMS_QUEUES
                for found in [
                    kube.get(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
                ]
            ]

        before = as_written()
        # ...and an admin maps vision to the platform team's LocalQueue
        Team.objects.filter(slug="vision").update(kueue_local_queue="research-gpus")
        # When cluster_sync runs
        call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
        # Then vision's quotas, cohort and weight are what its ClusterQueue enforces
        vision = Team.objects.select_related("cohort").get(slug="vision")
        rows = {q.resource: (q.limit, q.borrowing_limit) for q in vision.quotas.all()}
        assert rows == {GPU: (6, 2), "cpu": (64, None), "memory": (256, None)}
        assert vision.cohort is not None and vision.cohort.slug == "ml-platform"
        assert vision.weight == 2
        quotas = api_client_for(users["alice"]).get("/api/v1/teams/").json()
        gpu = next(q for t in quotas for q in t["quotas"] if q["resource"] == GPU)
        assert gpu["nominal"] == 6
        # ...and the portal wrote no Kueue object and changed none of the platform team's
        assert not [
            obj
            for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue")
            for obj in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR)
        ]
        assert as_written() == before
        # When alice submits, Then her job goes to that LocalQueue and Kueue runs it
        job = submit(users["alice"], "vision", 2, "on-platform", env=LONG)
        wait_for(lambda: fresh(job).state == JobState.RUNNING, timeout=60)
        assert cluster_job(job)["metadata"]["labels"][QUEUE_LABEL] == "research-gpus"
        assert fresh(job).placement["kueue"]["cluster_queue"] == "platform-vision"
    finally:
        worker.stop()
        for o in reversed(PLATFORMS_QUEUES):
            kube.delete(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))


def test_on_kueue_a_workspace_runs_stops_and_starts_again_with_its_home(
    kueue_worker: WorkerProcess, cluster: SandboxProcess
) -> None:
    # Given vision on Kueue, and alice's JupyterLab on one A100
    users = seed(vision=6, robotics=4)
    call_command("cluster_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115
    job = job_submit(
        user=users["alice"],
        data=workspace_spec(name="lab", gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"}),
    )
    # When Kueue admits it, Then it runs, its pod named in Kueue's LocalQueue
    job = running_again(job)
    (pod,) = kube.list_all("Pod", label_selector=f"{JOB_ID_LABEL}={job.pk}")
    assert pod["metadata"]["labels"][QUEUE_LABEL] == "gpu-portal"
    assert fresh(job).placement["kueue"]["cluster_queue"] == "vision"
    # When alice stops it, Then its pod and Kueue's Workload go; its home claim stays
    workspace_stop(user=users["alice"], job_id=job.pk)
    wait_for(lambda: fresh(job).state == JobState.STOPPED, timeout=60)
    wait_for(lambda: not list(kube.list_all("Workload", namespace=job.namespace)), timeout=30)
    assert kube.get("PersistentVolumeClaim", "home-alice", job.namespace)
    # When she starts it, Then Kueue admits it again and it runs
    workspace_start(user=users["alice"], job_id=job.pk)
    assert running_again(job).evictions == 0
