"""Reconcile against a listed cluster state: which events land on which job's timeline, in
what order, and what a run costs when nothing changed.

The cluster here is the adapter's ``list_all`` answering with real object shapes (as the
sandbox and the API server send them); tests/integration runs the same code against the
sandbox over HTTP.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cluster import kube
from cluster.labels import JOB_ID_LABEL, MANAGED_BY_LABEL
from jobs.models import Job, JobEvent, JobState
from jobs.tracking.reconcile import cluster_reconcile
from tests.factories import JobFactory, TeamFactory

pytestmark = pytest.mark.django_db

Obj = dict[str, Any]


class FakeCluster:
    """Objects by kind and namespace, listed the way ``kube.list_all`` yields them."""

    def __init__(self) -> None:
        self.objects: dict[str, list[Obj]] = defaultdict(list)
        self.lists: list[tuple[str, str | None]] = []

    def list_all(self, kind: str, *, namespace: str | None = None, **_: Any) -> list[Obj]:
        self.lists.append((kind, namespace))
        return [
            obj
            for obj in self.objects[kind]
            if namespace is None or obj["metadata"].get("namespace") == namespace
        ]

    def running_training_job(self, job: Job) -> None:
        labels = {JOB_ID_LABEL: str(job.pk), MANAGED_BY_LABEL: "gpu-portal"}
        name, ns = job.object_name, job.namespace
        self.objects["Job"].append(
            {
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": f"job-{job.pk}",
                    "labels": labels,
                },
                "spec": {"parallelism": 1, "completions": 1},
                "status": {"startTime": "2026-01-01T10:00:00Z", "active": 1, "ready": 1},
            }
        )
        pod_name = f"{name}-0-abcde"
        self.objects["Pod"].append(
            {
                "metadata": {
                    "name": pod_name,
                    "namespace": ns,
                    "uid": f"pod-{job.pk}",
                    "labels": labels,
                },
                "spec": {"nodeName": "gpu-a100-0"},
                "status": {"phase": "Running", "startTime": "2026-01-01T10:00:05Z"},
            }
        )
        self.event(
            job,
            "Job",
            name,
            f"job-{job.pk}",
            "SuccessfulCreate",
            f"Created pod: {pod_name}",
            "10:00:01",
        )
        self.event(
            job, "Pod", pod_name, f"pod-{job.pk}", "Scheduled", "Successfully assigned", "10:00:02"
        )
        self.event(
            job, "Pod", pod_name, f"pod-{job.pk}", "Started", "Started container main", "10:00:05"
        )

    def event(
        self, job: Job, kind: str, name: str, uid: str, reason: str, message: str, at: str
    ) -> None:
        self.objects["Event"].append(
            {
                "metadata": {"name": f"{name}.{reason}", "namespace": job.namespace},
                "involvedObject": {
                    "kind": kind,
                    "name": name,
                    "namespace": job.namespace,
                    "uid": uid,
                },
                "reason": reason,
                "message": message,
                "type": "Normal",
                "lastTimestamp": f"2026-01-01T{at}Z",
            }
        )


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster()
    monkeypatch.setattr(kube, "list_all", fake.list_all)
    return fake


def applied_jobs(count: int, **fields: Any) -> list[Job]:
    team = TeamFactory()
    now = timezone.now()
    jobs = []
    for _ in range(count):
        job = JobFactory(
            team=team, state=JobState.PENDING, admitted_at=now, applied_at=now, **fields
        )
        job.object_name = f"train-{job.pk}"
        job.save(update_fields=["object_name"])
        jobs.append(job)
    return jobs


def kubernetes_events(job: Job) -> list[str]:
    return list(
        job.events.filter(source=JobEvent.Source.KUBERNETES).values_list("reason", flat=True)
    )


def test_events_reach_the_timeline_once_and_before_the_change_they_explain(
    cluster: FakeCluster,
) -> None:
    # Given a pending job whose pod now runs, with three events about its Job and pod
    (job,) = applied_jobs(1)
    cluster.running_training_job(job)

    # When reconcile runs twice
    first = cluster_reconcile()
    second = cluster_reconcile()

    # Then the job runs, and each event is on its timeline exactly once
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert kubernetes_events(job) == ["SuccessfulCreate", "Scheduled", "Started"]
    assert (first.events_added, second.events_added) == (3, 0)
    # and the timeline reads cause before effect: the events, then "pending → running"
    timeline = list(job.events.order_by("created_at", "id").values_list("reason", flat=True))
    assert timeline.index("Started") < len(timeline) - 1
    assert "pending → running" in job.events.order_by("created_at", "id").last().message


def test_events_of_other_jobs_and_lookalike_replicasets_stay_off_the_timeline(
    cluster: FakeCluster,
) -> None:
    # Given two running jobs, and ReplicaSet events for "<object>-<hash>" and for a
    # Deployment whose name merely starts with the same text
    one, two = applied_jobs(2)
    for job in (one, two):
        cluster.running_training_job(job)
    cluster.event(
        one, "ReplicaSet", f"{one.object_name}-7d9f8c", "rs-1", "ScalingUp", "own", "10:00:06"
    )
    cluster.event(
        one,
        "ReplicaSet",
        f"{one.object_name}-canary-5b6c",
        "rs-2",
        "ScalingUp",
        "other",
        "10:00:07",
    )

    # When reconcile runs
    cluster_reconcile()

    # Then each job has its own three events; the first also has its ReplicaSet's
    assert kubernetes_events(two) == ["SuccessfulCreate", "Scheduled", "Started"]
    messages = list(one.events.filter(reason="ScalingUp").values_list("message", flat=True))
    assert messages == [f"ReplicaSet/{one.object_name}-7d9f8c: own"]


def _queries_for_a_quiet_run(cluster: FakeCluster, count: int) -> tuple[int, int]:
    for job in applied_jobs(count):
        cluster.running_training_job(job)
    cluster_reconcile()  # catches every row up
    with CaptureQueriesContext(connection) as queries:
        report = cluster_reconcile()
    writes = [
        q for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]
    assert report.updated == [] and report.events_added == 0
    return len(queries), len(writes)


def test_a_run_where_nothing_changed_costs_the_same_for_5_or_30_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given clusters where 5, then 30, running jobs are already in step with their rows
    small, large = FakeCluster(), FakeCluster()
    monkeypatch.setattr(kube, "list_all", small.list_all)
    small_queries, small_writes = _queries_for_a_quiet_run(small, 5)
    Job.objects.all().delete()
    monkeypatch.setattr(kube, "list_all", large.list_all)
    large_queries, large_writes = _queries_for_a_quiet_run(large, 30)

    # Then the quiet run's SQL does not grow with the jobs, and writes nothing
    assert small_queries == large_queries
    assert small_writes == large_writes == 0


def test_cancelled_jobs_whose_objects_remain_get_their_cleanup_again(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a running job, a cancelled job whose Job object is still listed (its cleanup
    # task was lost) and a cancelled job whose objects are gone
    from jobs import tasks

    queued: list[int] = []
    monkeypatch.setattr(tasks.job_cleanup_task, "delay", queued.append)
    running, leftover, cleaned = applied_jobs(3)
    for job in (running, leftover):
        cluster.running_training_job(job)
    Job.objects.filter(pk__in=[leftover.pk, cleaned.pk]).update(state=JobState.CANCELLED)

    # When the periodic reconcile runs
    report = tasks.reconcile_task()

    # Then only the leftover's cleanup is queued again, and the running job is untouched
    assert queued == report["cleanup"] == [leftover.pk]
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING


def test_a_pass_that_cannot_reach_the_cluster_reports_it_and_leaves_jobs_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a tracked job and a cluster that does not answer
    (job,) = applied_jobs(1)

    def unreachable(*_: Any, **__: Any) -> list[Obj]:
        raise kube.TemporaryClusterError("Cluster unreachable: connection refused")

    monkeypatch.setattr(kube, "list_all", unreachable)

    # When reconcile runs
    report = cluster_reconcile()

    # Then it says why nothing was tracked, and the job keeps the state it had
    assert report.cluster_error == "Cluster unreachable: connection refused"
    assert Job.objects.get(pk=job.pk).state == job.state
    assert not report.lost and not report.updated


def test_lost_work_is_queued_again_even_when_the_cluster_refuses_the_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an admitted job whose apply task was lost long ago, and an API server that
    # refuses the portal's lists (403: a permanent error, not an outage)
    from jobs import tasks

    long_ago = timezone.now() - timedelta(hours=1)
    stale = JobFactory(state=JobState.QUEUED, admitted_at=long_ago)
    Job.objects.filter(pk=stale.pk).update(updated_at=long_ago)
    queued: list[int] = []
    monkeypatch.setattr(tasks.job_apply_task, "delay", queued.append)

    def refused(*_: Any, **__: Any) -> list[Obj]:
        raise kube.PermanentClusterError("events is forbidden", status=403)

    monkeypatch.setattr(kube, "list_all", refused)

    # When the periodic reconcile runs
    report = tasks.reconcile_task()

    # Then the refusal is reported and the lost apply is queued again all the same
    assert report["cluster_error"] == "events is forbidden"
    assert queued == [stale.pk]
