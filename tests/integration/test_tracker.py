"""The watch tracker keeps job rows in step with a real sandbox within seconds, with the
periodic reconcile turned down to once an hour: it resumes after dropped watches, lists
again after a 410, hands over between replicas through its Lease, and the reconcile still
catches what no tracker saw."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection

from cluster import kube
from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from jobs.tracking import tracker as tracker_module
from jobs.tracking.reconcile import cluster_reconcile
from jobs.tracking.tracker import ClusterTracker
from tests.conftest import training_spec
from tests.sandbox_process import SandboxProcess
from tests.worker_process import WorkerProcess, wait_for, wait_job

pytestmark = pytest.mark.django_db(transaction=True)
OWN_CLUSTER = True  # it breaks, stops or restarts it


@pytest.fixture(scope="module")
def worker_overrides() -> dict[str, str]:
    """A worker that applies jobs but reconciles only once an hour: what moves job rows
    here is the tracker."""
    return {"RECONCILE_INTERVAL_SECONDS": "3600"}


@pytest.fixture
def users(worker: WorkerProcess, settings: Any) -> dict[str, User]:
    settings.TRACKER_LEASE_SECONDS = 2.0
    call_command("seed_demo", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    return {u.username: u for u in User.objects.all()}


class Running:
    """A tracker in a thread of this process (its own database connection)."""

    def __init__(self, identity: str) -> None:
        self.tracker = ClusterTracker(identity)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.tracker.run()
        finally:
            connection.close()

    def stop(self) -> None:
        self.tracker.stop()
        self.thread.join(timeout=15)


@pytest.fixture
def tracker(users: dict[str, User]) -> Iterator[Running]:
    running = Running("tracker-a")
    assert running.tracker.leading.wait(10)
    yield running
    running.stop()


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def complete(job: Job) -> bool:
    """Whether the job's Kubernetes Job has finished in the cluster (its ``Complete``
    condition, set by the Job controller)."""
    obj = kube.get("Job", job.object_name, job.namespace) or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def short_job(user: User, name: str) -> Job:
    # 60 simulated seconds: two real seconds on the sandbox at speed 30
    return job_submit(user=user, data=training_spec(name=name, env={"SANDBOX_DURATION": "60s"}))


def test_changes_reach_the_job_through_the_watches_without_the_reconcile(
    users: dict[str, User],
    tracker: Running,
    cluster: SandboxProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Watches reopen every second here, as if the API server closed them that often
    monkeypatch.setattr(tracker_module, "WATCH_SECONDS", 1)
    job = short_job(users["alice"], "tracked")
    wait_for(lambda: fresh(job).state == JobState.RUNNING, timeout=20)
    done = wait_for(lambda: (j := fresh(job)).state == JobState.SUCCEEDED and j, timeout=20)
    # (with the reconcile an hour away, the watches moved the row; how fast they do is
    # bench_tracking's figure, not a timed test's: docs/performance.md)
    assert tracker.tracker.observed > 0
    assert complete(done)
    assert done.exit_code == 0 and done.finished_at is not None
    reasons = list(done.events.values_list("reason", flat=True))
    assert "Scheduled" in reasons and reasons.count("Scheduled") == 1


def test_a_restarted_api_server_loses_nothing(
    users: dict[str, User], tracker: Running, cluster: SandboxProcess
) -> None:
    # Given a running job, tracked
    job = job_submit(
        user=users["alice"], data=training_spec(name="survivor", env={"SANDBOX_DURATION": "5m"})
    )
    wait_for(lambda: fresh(job).state == JobState.RUNNING, timeout=20)
    # When the API server restarts: its watch cache is gone, so every resumed watch is
    # told 410 Expired and lists again
    cluster.restart(hard=True)
    # Then a job submitted afterwards is tracked to the end, and the first one too
    after = short_job(users["alice"], "after")
    wait_for(lambda: fresh(after).state == JobState.SUCCEEDED, timeout=30)
    wait_for(lambda: fresh(job).state == JobState.SUCCEEDED, timeout=30)
    assert fresh(job).reason != "Lost"


def test_a_tracker_observes_no_job_before_it_has_listed_every_kind(
    users: dict[str, User],
    tracker: Running,
    cluster: SandboxProcess,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    # Given a running job, tracked, past the grace period after which a job whose objects
    # are gone counts as lost
    settings.LOST_GRACE_SECONDS = 0
    job = job_submit(
        user=users["alice"], data=training_spec(name="listed", env={"SANDBOX_DURATION": "60m"})
    )
    wait_job(job, JobState.RUNNING, timeout=30)
    tracker.stop()
    # When the next tracker's list of Jobs comes seconds after its list of Pods (as on a
    # loaded machine, or an API server that has just restarted)
    listed = kube.list_with_version

    def slow_jobs(kind: str, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        if kind == "Job":
            time.sleep(3)
        return listed(kind, **kwargs)

    monkeypatch.setattr(tracker_module.kube, "list_with_version", slow_jobs)
    second = Running("tracker-b")
    try:
        assert second.tracker.leading.wait(10)
        wait_for(lambda: second.tracker.observed > 0, timeout=20)
        # Then the job was never taken for lost: it is still running
        found = fresh(job)
        assert found.state == JobState.RUNNING, f"{found.reason}: {found.message}"
    finally:
        second.stop()


def test_a_second_tracker_takes_over_when_the_leader_stops(
    users: dict[str, User], tracker: Running, cluster: SandboxProcess
) -> None:
    # Given a second tracker waiting while the first leads
    second = Running("tracker-b")
    try:
        time.sleep(3)
        assert not second.tracker.leading.is_set()
        # When the leader stops renewing (it dies; its lease is not handed back)
        tracker.stop()
        # Then the second leads within the lease's two seconds (and a renewal period)
        assert second.tracker.leading.wait(6)
        holder = kube.get("Lease", "gpu-portal-tracker", "default")["spec"]["holderIdentity"]
        assert holder == "tracker-b"
        # and tracks
        job = short_job(users["alice"], "handed-over")
        wait_for(lambda: fresh(job).state == JobState.SUCCEEDED, timeout=20)
    finally:
        second.stop()


def test_the_reconcile_still_catches_what_no_tracker_saw(
    users: dict[str, User], cluster: SandboxProcess
) -> None:
    # Given no tracker at all, a job runs to the end in the cluster
    job = short_job(users["alice"], "unwatched")
    applied = wait_for(lambda: (j := fresh(job)).applied_at is not None and j, timeout=20)
    wait_for(lambda: complete(applied), timeout=60)
    assert fresh(job).state == JobState.PENDING
    # When the safety-net pass runs
    cluster_reconcile()
    # Then the row catches up
    assert fresh(job).state == JobState.SUCCEEDED


def test_an_unreachable_api_server_fails_no_job_and_tracking_resumes(
    users: dict[str, User], tracker: Running, cluster: SandboxProcess
) -> None:
    # Given a running job, tracked
    job = job_submit(
        user=users["alice"], data=training_spec(name="patient", env={"SANDBOX_DURATION": "4m"})
    )
    wait_for(lambda: fresh(job).state == JobState.RUNNING, timeout=20)
    # When the API server is down for longer than the tracker's lease
    cluster.stop()
    time.sleep(5)
    # Then nothing was marked failed or lost meanwhile
    assert fresh(job).state == JobState.RUNNING
    # And once it is back, the tracker leads again and follows the job to its end
    cluster.start(reset=False)
    assert wait_for(lambda: tracker.tracker.leading.is_set(), timeout=20)
    # (the restarted controllers resync first: seconds idle, a minute on a loaded machine)
    done = wait_job(job, JobState.SUCCEEDED, timeout=90)
    assert done.reason != "Lost"
