"""A job Kueue runs, followed through its Job and its Workload, which reach the portal by
separate watches (or lists) and so in either order."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from cluster.labels import JOB_ID_LABEL, MANAGED_BY_LABEL
from jobs.models import Job, JobState
from jobs.tracking import tracker
from jobs.tracking.reconcile import Advisor, ReconcileReport, job_observe
from jobs.tracking.tracker import ClusterTracker, _Informer
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

Obj = dict[str, Any]
PREEMPTED = (
    "Preempted to accommodate a workload (UID: 4f1c, JobUID: 9a2e) due to prioritization "
    "in the ClusterQueue; preemptor path: /vision; preemptee path: /vision"
)


def running_kueue_job() -> Job:
    now = timezone.now()
    started = now - timedelta(minutes=10)
    return JobFactory(  # type: ignore[no-any-return]
        state=JobState.RUNNING,
        queueing=Job.Queueing.KUEUE,
        object_name="train",
        applied_at=started,
        admitted_at=started,
        started_at=started,
    )


def suspended_job(job: Job) -> Obj:
    labels = {JOB_ID_LABEL: str(job.pk), MANAGED_BY_LABEL: "gpu-portal"}
    return {
        "metadata": {"name": job.object_name, "namespace": job.namespace, "labels": labels},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1},
        "status": {"startTime": "2026-01-01T10:00:00Z"},
    }


def workload(*conditions: tuple[str, str, str]) -> Obj:
    return {
        "metadata": {"name": "job-train-1a2b3", "creationTimestamp": "2026-01-01T10:00:00Z"},
        "spec": {"queueName": "vision"},
        "status": {
            "conditions": [
                {
                    "type": kind,
                    "status": status,
                    "reason": kind,
                    "message": message,
                    "lastTransitionTime": "2026-01-01T10:00:00Z",
                }
                for kind, status, message in conditions
            ]
        },
    }


ADMITTED = workload(
    ("QuotaReserved", "True", "Quota reserved in ClusterQueue vision"),
    ("Admitted", "True", "The workload is admitted"),
)
EVICTED = workload(
    ("QuotaReserved", "False", "Preempted"),
    ("Admitted", "False", "Preempted"),
    ("Evicted", "True", PREEMPTED),
    ("Preempted", "True", PREEMPTED),
)


def observe(job: Job, owner: Obj, kueue_workload: Obj) -> Job:
    job_observe(
        job,
        workload=[owner],
        pods=[],
        events=[],
        known_events=set(),
        advisor=Advisor(),
        report=ReconcileReport(),
        now=timezone.now(),
        kueue_workloads=[kueue_workload],
    )
    return Job.objects.get(pk=job.pk)


def test_an_eviction_seen_at_once_is_counted_and_its_run_kept() -> None:
    job = running_kueue_job()
    evicted = observe(job, suspended_job(job), EVICTED)
    assert (evicted.state, evicted.reason, evicted.evictions) == (JobState.QUEUED, "Preempted", 1)
    assert evicted.admitted_at is None and evicted.started_at is None
    assert len(evicted.earlier_runs) == 1


def test_an_eviction_is_counted_when_the_suspended_job_is_seen_before_the_evicted_workload() -> (
    None
):
    # Given a running job whose Job is seen suspended while its Workload, from another
    # watch, still says admitted
    job = running_kueue_job()
    between = observe(job, suspended_job(job), ADMITTED)
    assert between.state == JobState.QUEUED and between.evictions == 0
    # When the Workload's eviction arrives
    evicted = observe(between, suspended_job(job), EVICTED)
    # Then the eviction is counted once, its run kept for the GPU-hours
    assert (evicted.reason, evicted.evictions) == ("Preempted", 1)
    assert len(evicted.earlier_runs) == 1
    # and seeing it again counts nothing more
    assert observe(evicted, suspended_job(job), EVICTED).evictions == 1


def owned_by(job: Job, kueue_workload: Obj) -> Obj:
    """The Workload as Kueue makes it for the job's Job (its owner reference)."""
    meta = {
        **kueue_workload["metadata"],
        "name": f"job-{job.object_name}",
        "namespace": job.namespace,
        "ownerReferences": [{"kind": "Job", "name": job.object_name}],
    }
    return {**kueue_workload, "metadata": meta}


def test_a_pass_never_counts_more_admitted_jobs_than_kueue_holds_even_halfway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a running job and a queued one
    running = running_kueue_job()
    waiting = JobFactory(
        state=JobState.QUEUED,
        queueing=Job.Queueing.KUEUE,
        object_name="next",
        applied_at=timezone.now() - timedelta(minutes=1),
    )
    # and Kueue has since evicted the running one and admitted the queued one in its place
    unsuspended = suspended_job(waiting)
    unsuspended["spec"]["suspend"] = False
    informer = _Informer()
    informer.replace("Job", [suspended_job(running), unsuspended])
    informer.replace("Workload", [owned_by(running, EVICTED), owned_by(waiting, ADMITTED)])
    # When the tracker writes what it sees, one row at a time
    admitted_after_each_row: list[int] = []

    def observe_and_count(job: Job, **kwargs: Any) -> None:
        job_observe(job, **kwargs)
        admitted_after_each_row.append(Job.objects.filter(admitted_at__isnull=False).count())

    monkeypatch.setattr(tracker, "job_observe", observe_and_count)
    ClusterTracker("test")._observe(informer)
    # Then at no point do both hold the quota
    assert admitted_after_each_row == [0, 1]
    assert Job.objects.get(pk=running.pk).admitted_at is None
    assert Job.objects.get(pk=waiting.pk).admitted_at is not None
