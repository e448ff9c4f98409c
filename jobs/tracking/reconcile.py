"""Reconcile the portal's job rows with the cluster (level-triggered, safe to run twice).

One paginated LIST per kind, filtered by the portal's label, instead of a call
per job; only rows whose state changed are written; a Redis lock keeps two
runs from overlapping. Also recovers work whose Celery task was lost.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.db.models import F, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from cluster import kube
from cluster.labels import JOB_ID_LABEL, MANAGED_BY_SELECTOR
from cluster.launchers import owner_kinds
from cluster.models import Cluster
from cluster.nodes import cluster_snapshot
from cluster.priority_classes import PRIORITY_CLASSES
from cluster.services import cluster_answered, cluster_unreachable, clusters_tracked
from core.redis_client import redis_client
from jobs import tasks
from jobs.models import FINAL_STATES, Job, JobEvent, JobState
from jobs.selectors.kueue_words import KueueWords
from jobs.services.eviction import kueue_requeue_changes
from jobs.services.transitions import job_transition
from jobs.tracking.kueue import admitted_at as kueue_admitted_at
from jobs.tracking.kueue import (
    held_by_kueue,
    kueue_index,
    kueue_names,
    newest,
    observe_queued,
    pending_message,
    workload_owner,
)
from jobs.tracking.observe import (
    Observation,
    observe_inference,
    observe_pytorchjob,
    observe_training,
    observe_trainjob,
    true_conditions,
)
from scheduling import ClusterSnapshot, explain, pod_from_k8s, schedule

logger = logging.getLogger(__name__)

LOCK_NAME = "gpu-portal:reconcile"
# Short, and renewed while a pass runs (``_renewed``): a worker killed mid-pass leaves the
# lock for at most this long, not for the length of the longest pass (it was 120 s, and a
# killed worker stalled every reconcile for two minutes).
LOCK_TIMEOUT_SECONDS = 15
LOCK_RENEW_SECONDS = 5
DEDUPE_KEY_LEN = 200

Obj = dict[str, Any]


@dataclass
class ReconcileReport:
    skipped: bool = False
    seen_jobs: int = 0
    updated: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    events_added: int = 0
    requeued_apply: list[int] = field(default_factory=list)
    requeued_admission: list[int] = field(default_factory=list)
    # Jobs that failed because a node stopped responding: id → the pods it evicted
    # (``{"pod", "node", "at"}``, plain JSON for the task that explains them).
    node_failures: dict[int, list[dict[str, str]]] = field(default_factory=dict)
    cleanup: list[int] = field(default_factory=list)
    evictions: list[int] = field(default_factory=list)  # evicted jobs still to stop
    cluster_error: str = ""  # the cluster could not be read: nothing was tracked this run
    duration_seconds: float = 0.0


def _lock() -> Any:
    """The pass's lock. Not thread-local: ``_renewed`` extends it from a thread of its own,
    and a thread-local token is not there in that thread (the extend failed, the renewal
    stopped, and a pass longer than the timeout lost its lock to the next one)."""
    return redis_client().lock(
        LOCK_NAME, timeout=LOCK_TIMEOUT_SECONDS, blocking=False, thread_local=False
    )


def _renewed(lock: Any) -> threading.Event:
    """Keep ``lock`` held while the pass runs: extend it every few seconds until the
    returned event is set."""
    done = threading.Event()

    def renew() -> None:
        while not done.wait(LOCK_RENEW_SECONDS):
            try:
                lock.extend(LOCK_TIMEOUT_SECONDS, replace_ttl=True)
            except (redis.exceptions.LockError, redis.exceptions.RedisError):
                return  # lost (or Redis gone): the release says so

    threading.Thread(target=renew, name="reconcile-lock", daemon=True).start()
    return done


def job_id_of(obj: Obj) -> int | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL)
    return int(value) if value and str(value).isdigit() else None


def by_job(objects: Iterable[Obj]) -> dict[int, list[Obj]]:
    grouped: dict[int, list[Obj]] = defaultdict(list)
    for obj in objects:
        job_id = job_id_of(obj)
        if job_id is not None:
            grouped[job_id].append(obj)
    return grouped


def kueue_by_job(workloads: Iterable[Obj], owners: Iterable[Obj]) -> dict[int, list[Obj]]:
    """Kueue's Workloads of each portal job, through the Job or Pod each was made for
    (Kueue copies none of the portal's labels onto them)."""
    job_of = {
        (str(o["metadata"].get("namespace")), str(o["metadata"]["name"])): job_id_of(o)
        for o in owners
    }
    found: dict[int, list[Obj]] = defaultdict(list)
    for workload in workloads:
        owner = workload_owner(workload)
        job_id = job_of.get(owner[1:]) if owner is not None else None
        if job_id is not None:
            found[job_id].append(workload)
    return found


def _event_key(event: Obj) -> str:
    involved = event.get("involvedObject") or {}
    raw = f"{involved.get('uid', '')}:{event.get('reason', '')}:{event.get('message', '')}"
    return "k8s:" + hashlib.sha256(raw.encode()).hexdigest()[:40]


class EventIndex:
    """The cluster's events, indexed once per run by what they are about.

    Matching each job against every event would cost jobs × events per run (10,000 × 60,000
    on a busy cluster); the index makes it one lookup per object of the job.
    """

    def __init__(self, events: Iterable[Obj]) -> None:
        self._by_uid: dict[str, list[Obj]] = defaultdict(list)
        self._by_name: dict[tuple[str, str], list[Obj]] = defaultdict(list)
        self._by_deployment: dict[tuple[str, str], list[Obj]] = defaultdict(list)
        for event in events:
            involved = event.get("involvedObject") or {}
            uid = involved.get("uid")
            if uid:
                self._by_uid[uid].append(event)
            key = (str(involved.get("namespace") or ""), str(involved.get("name") or ""))
            self._by_name[key].append(event)
            if involved.get("kind") == "ReplicaSet":
                # A Deployment's ReplicaSets are named "<deployment>-<pod-template-hash>".
                self._by_deployment[(key[0], key[1].rpartition("-")[0])].append(event)

    def for_job(self, job: Job, owners: list[Obj], pods: list[Obj]) -> list[Obj]:
        """Events about the job's objects, its pods and (for Deployments) its ReplicaSets."""
        found: dict[int, Obj] = {}
        for obj in owners + pods:
            meta = obj["metadata"]
            for event in self._by_uid.get(meta.get("uid") or "", ()):
                found[id(event)] = event
            for event in self._by_name.get((meta.get("namespace") or "", meta["name"]), ()):
                found[id(event)] = event
        for event in self._by_deployment.get((job.namespace, job.object_name), ()):
            found[id(event)] = event
        return list(found.values())


def tracked_jobs() -> Any:
    """Applied jobs that have not finished: the ones a pass follows (with Kueue, also the
    queued ones: they wait in the cluster, in Kueue's queue; not one whose objects the
    portal is deleting, an eviction or a workspace's stop, which its pods still running
    must not undo).

    Admitted ones first: a pass writes its rows one at a time, so a job Kueue evicted (or
    one that finished) is written before the job Kueue admitted in its place, and the rows
    never count more quota in use than the cluster holds, not even halfway through a pass.
    """
    return Job.objects.filter(
        Q(state__in=[JobState.PENDING, JobState.RUNNING])
        | Q(state=JobState.QUEUED, queueing=Job.Queueing.KUEUE, evicted_at__isnull=True),
        applied_at__isnull=False,
    ).order_by(F("admitted_at").asc(nulls_last=True), "pk")


def known_event_keys(jobs: Any = None) -> dict[int, set[str]]:
    """The cluster events already on the tracked jobs' timelines: one query per run.

    The jobs are picked by a subquery, not by a list of ids: 10,000 bound parameters cost
    more to send and parse than the query itself. A job that changed state in between
    only makes its already-recorded events look new; their unique key skips them.
    """
    known: dict[int, set[str]] = defaultdict(set)
    rows = JobEvent.objects.filter(
        job__in=(tracked_jobs() if jobs is None else jobs).values("pk"),
        source=JobEvent.Source.KUBERNETES,
    ).values_list("job_id", "dedupe_key")
    for job_id, key in rows.iterator(chunk_size=5000):
        known[job_id].add(key)
    return known


def _new_events(job: Job, events: list[Obj], known: set[str]) -> list[JobEvent]:
    """Timeline rows for the job's cluster events not recorded yet, oldest first."""
    rows = []
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        key = _event_key(event)[:DEDUPE_KEY_LEN]
        if key in known:
            continue
        known.add(key)
        involved = event.get("involvedObject") or {}
        rows.append(
            JobEvent(
                job=job,
                dedupe_key=key,
                source=JobEvent.Source.KUBERNETES,
                type=str(event.get("type") or "Normal")[:10],
                reason=str(event.get("reason") or "")[:64],
                message=f"{involved.get('kind', '')}/{involved.get('name', '')}: "
                f"{event.get('message', '')}",
            )
        )
    return rows


class Advisor:
    """Explains unschedulable pods with the scheduling core, on one snapshot per run."""

    def __init__(self) -> None:
        self._snapshot: ClusterSnapshot | None = None
        self._failed = False

    def advice(self, pod_obj: Obj) -> str:
        if self._failed:
            return ""
        if self._snapshot is None:
            try:
                self._snapshot = cluster_snapshot()
            except kube.ClusterError as exc:
                logger.warning("no advice: cannot list nodes/pods: %s", exc)
                self._failed = True
                return ""
        pod = pod_from_k8s(pod_obj, PRIORITY_CLASSES)
        result = schedule(pod, self._snapshot)
        return explain(pod, result, self._snapshot).text


_OBSERVED = ("state", "reason", "message", "exit_code", "placement")


def _apply_observation(job: Job, seen: Observation, advice: str, report: ReconcileReport) -> None:
    changes: dict[str, Any] = {}
    for name in _OBSERVED:
        value = getattr(seen, name)
        if getattr(job, name) != value:
            changes[name] = value
    if job.advice != advice:
        changes["advice"] = advice
    # The cluster's own timestamps (the API server's clock, as kubectl shows them); now only
    # when the cluster gives none.
    now = timezone.now()
    if seen.started_at and job.started_at is None:
        changes["started_at"] = seen.started_at
    if seen.state == JobState.RUNNING and job.started_at is None and "started_at" not in changes:
        changes["started_at"] = now
    if seen.state in FINAL_STATES and job.finished_at is None:
        changes["finished_at"] = seen.finished_at or now
    if job.queueing == Job.Queueing.KUEUE:
        changes.update(_kueue_changes(job, seen, now))
    if not changes:
        return
    # Conditional: a concurrent cancel (or another run) wins; we never undo it.
    moved = job_transition(
        job=job,
        where={"state": job.state},
        changes=changes,
        event_reason=seen.reason if "state" in changes else "",
        event_message=f"{job.state} → {seen.state}: {seen.message}",
        event_type="Warning" if seen.state == JobState.FAILED else "Normal",
    )
    if moved:
        report.updated.append(job.pk)
        if seen.state == JobState.FAILED and seen.node_evictions:
            report.node_failures[job.pk] = [e.as_json() for e in seen.node_evictions]
        kueue_moved = job.queueing == Job.Queueing.KUEUE and "admitted_at" in changes
        if (seen.state in FINAL_STATES or kueue_moved) and (
            job.team_id not in report.requeued_admission
        ):
            # Its quota is free (or Kueue took or freed some): the team's (and its
            # cohort's) queue may move now, and which jobs borrow may change.
            report.requeued_admission.append(job.team_id)


def _kueue_changes(job: Job, seen: Observation, now: datetime) -> dict[str, Any]:
    """Kueue admits and evicts in the cluster; the row follows as with the portal's own
    engine: ``admitted_at`` once Kueue lets the job start, and an eviction (its Job
    suspended again) counted, its run kept for the GPU-hour accounting."""
    if seen.state != JobState.QUEUED:
        return {"admitted_at": seen.admitted_at or now} if job.admitted_at is None else {}
    # Admitted, and now evicted: counted once, since the count clears ``admitted_at`` (and
    # Kueue clears ``Evicted`` when it admits the Workload again). Not by the row's state:
    # the Job's watch may tell of its suspension before the Workload's tells why, so the
    # row can be queued already, in the words of a Workload not yet updated.
    if job.admitted_at is not None and seen.reason == "Preempted":
        return kueue_requeue_changes(job, now)
    return {}


def kueue_words_for(
    by_job: dict[int, list[Obj]], cluster: Cluster | None = None
) -> KueueWords | None:
    """The explainer of a pass over these jobs' Workloads (in ``cluster``): only when the
    portal manages Kueue's configuration (else the quotas Kueue applies are not the
    portal's)."""
    if not by_job or not settings.KUEUE_MANAGED:
        return None
    return KueueWords(kueue_index(by_job), cluster)


def _kueue_message(job: Job, seen: Observation, workload: Obj, words: KueueWords) -> str:
    """The queued job's message in the portal engine's words, Kueue's beside them; the
    translated message when those do not apply."""
    better = None
    if seen.reason == "QuotaExceeded":
        better = words.waiting(job, workload, pending_message(workload))
    elif seen.reason == "Preempted":
        conditions = true_conditions(workload)
        preempted = conditions.get("Preempted") or {}
        better = words.evicted(
            job, conditions.get("Evicted") or {}, str(preempted.get("reason") or "")
        )
    return better or seen.message


def _mark_lost(job: Job, report: ReconcileReport) -> None:
    message = "Its objects disappeared from the cluster (deleted outside the portal?)."
    lost = job_transition(
        job=job,
        where={"state": job.state},
        changes={
            "state": JobState.FAILED,
            "reason": "Lost",
            "message": message,
            "finished_at": timezone.now(),
        },
        event_reason="Lost",
        event_message=message,
        event_type="Warning",
    )
    if lost:
        report.lost.append(job.pk)


# The fields a pass reads of each tracked job (``_apply_observation`` compares the rest).
TRACKED_FIELDS = (
    "team",
    "kind",
    "namespace",
    "object_name",
    "applied_at",
    "queueing",
    "admitted_at",
    "evictions",
    "earlier_runs",
    *_OBSERVED,
    "advice",
    "started_at",
    "finished_at",
    # Its place in the queue, for the words of a job waiting in Kueue (kueue_words): read
    # with the rest, not one query each per job (two deferred loads a job cost 20 of the
    # 89 s a 10,000-job catch-up took, bench_admission --engine kueue, 2026-11-26).
    "priority_value",
    "created_at",
)


def _track(report: ReconcileReport, cluster: Cluster, *, first: bool) -> None:
    """One cluster's pass (the adapter bound to it): its jobs against its objects."""
    placed = tracked_jobs().on_cluster(cluster.pk, first=first)
    active = list(
        # Only what tracking reads: the spec and manifests are the row's bulk (kilobytes of
        # JSON each), and decoding them for 10,000 jobs per run was most of the run's time.
        placed.only(*TRACKED_FIELDS)
    )
    report.seen_jobs += len(active)
    # List items carry no ``kind`` (only the list does), so group by kind here.
    owners = by_job(kube.list_all("Job", label_selector=MANAGED_BY_SELECTOR))
    for kind in ("Deployment", *owner_kinds()):
        for job_id, found in by_job(
            kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR)
        ).items():
            owners[job_id].extend(found)
    _cleanup_leftovers(owners, report, Job.objects.on_cluster(cluster.pk, first=first))
    if not active:
        return
    pods = by_job(kube.list_all("Pod", label_selector=MANAGED_BY_SELECTOR))
    # Events carry no labels: list them only in the namespaces of jobs being tracked, not
    # the whole cluster's (thousands on a busy cluster, every few seconds).
    events = EventIndex(
        event
        for namespace in sorted({job.namespace for job in active})
        for event in kube.list_all("Event", namespace=namespace)
    )
    known_events = known_event_keys(placed)
    kueue: dict[int, list[Obj]] = {}
    if any(job.queueing == Job.Queueing.KUEUE for job in active):
        kueue = kueue_by_job(
            kube.list_all("Workload"),
            [o for objs in owners.values() for o in objs] + [p for ps in pods.values() for p in ps],
        )
    advisor = Advisor()
    words = kueue_words_for(kueue, cluster)
    now = timezone.now()
    for job in active:
        workload = owners.get(job.pk, [])
        job_pods = pods.get(job.pk, [])
        job_observe(
            job,
            workload=workload,
            pods=job_pods,
            events=events.for_job(job, workload + kueue.get(job.pk, []), job_pods),
            known_events=known_events[job.pk],
            advisor=advisor,
            report=report,
            now=now,
            kueue_workloads=kueue.get(job.pk, []),
            kueue_words=words,
        )


def job_observe(
    job: Job,
    *,
    workload: list[Obj],
    pods: list[Obj],
    events: list[Obj],
    known_events: set[str],
    advisor: Advisor,
    report: ReconcileReport,
    now: datetime,
    kueue_workloads: Iterable[Obj] = (),
    kueue_words: KueueWords | None = None,
) -> None:
    """Bring one tracked job's row in line with its objects, pods and events as seen now:
    the one path for the periodic pass and the watch tracker (``jobs.tracking.tracker``).

    1. No objects: marked ``Lost`` once past the grace period (a slow cache may not list
       a fresh object yet).
    2. New Kubernetes events go on the timeline, before the state change they explain.
    3. The objects give the state, reason and message; an unschedulable pod gets advice.
       A job Kueue holds back is ``queued``, for the reason its Workload gives (in the
       portal engine's words when ``kueue_words`` can give them).
    """
    if not workload:
        grace = timedelta(seconds=settings.LOST_GRACE_SECONDS)
        if job.applied_at and now - job.applied_at > grace:
            _mark_lost(job, report)
        return
    new_events = _new_events(job, events, known_events)
    if new_events:
        # A row another run wrote meanwhile is skipped.
        JobEvent.objects.bulk_create(new_events, ignore_conflicts=True)
        report.events_added += len(new_events)
    main = workload[0]
    kueue_workload = newest(list(kueue_workloads))
    if job.queueing == Job.Queueing.KUEUE and held_by_kueue(job.kind, main, pods):
        seen = observe_queued(kueue_workload)
        if kueue_words is not None and kueue_workload is not None:
            seen.message = _kueue_message(job, seen, kueue_workload, kueue_words)
    elif "pytorchReplicaSpecs" in (main.get("spec") or {}):
        seen = observe_pytorchjob(main, pods, events)
    elif "runtimeRef" in (main.get("spec") or {}):
        seen = observe_trainjob(main, pods, events)
    elif job.kind == Job.Kind.TRAINING:
        seen = observe_training(main, pods, events)
    else:
        seen = observe_inference(main, pods, events)
    if kueue_workload is not None:
        seen.admitted_at = kueue_admitted_at(kueue_workload)
        seen.placement = {**seen.placement, "kueue": kueue_names(kueue_workload)}
    if seen.unschedulable_pod is None:
        advice = ""
    elif job.advice and job.message == seen.message:
        # Same scheduler verdict as last time: keep the advice rather than listing every
        # pod of the cluster again.
        advice = job.advice
    else:
        advice = advisor.advice(seen.unschedulable_pod)
    _apply_observation(job, seen, advice, report)


def _id_list(ids: list[int]) -> Any:
    """A value for ``pk__in``: on PostgreSQL one array parameter, not one per id (parsing
    and binding 10,000 placeholders cost more than the query)."""
    if connection.vendor == "postgresql":
        return RawSQL("SELECT unnest(%s::bigint[])", (ids,))
    return ids


def _cleanup_leftovers(owners: dict[int, list[Obj]], report: ReconcileReport, placed: Any) -> None:
    """Cancelled jobs whose objects are still in the cluster: their cleanup is due again."""
    leftovers = placed.filter(pk__in=_id_list(list(owners)), state=JobState.CANCELLED)
    for job_id in leftovers.values_list("pk", flat=True):
        report.cleanup.append(job_id)


def _recover_queue(report: ReconcileReport) -> None:
    """Find work whose task never ran (broker restart, worker killed): the task queues it."""
    cutoff = timezone.now() - timedelta(seconds=settings.STALE_QUEUE_SECONDS)
    stale_apply = Job.objects.filter(
        Q(admitted_at__lt=cutoff) | Q(queueing=Job.Queueing.KUEUE, updated_at__lt=cutoff),
        state=JobState.QUEUED,
        applied_at__isnull=True,
    ).values_list("pk", flat=True)
    for job_id in stale_apply:
        report.requeued_apply.append(job_id)
    teams = set(
        Job.objects.filter(
            state=JobState.QUEUED,
            admitted_at__isnull=True,
            updated_at__lt=cutoff,
            queueing=Job.Queueing.PORTAL,
        ).values_list("team_id", flat=True)
    )
    for team_id in sorted(teams - set(report.requeued_admission)):
        report.requeued_admission.append(team_id)
    stale_evictions = Job.objects.filter(state=JobState.QUEUED, evicted_at__lt=cutoff).values_list(
        "pk", flat=True
    )
    report.evictions.extend(stale_evictions)


def cluster_reconcile() -> ReconcileReport:
    """1. Take the reconcile lock (skip if another run holds it).
    2. LIST the portal's Jobs, Deployments and Pods (by label) and recent Events.
    3. For each applied, unfinished job: map objects to state, record new events,
       explain unschedulable pods, mark vanished jobs ``Lost``.
    4. Find admission/apply work whose task was lost (``reconcile_task`` queues it again).
    A cluster that cannot be read (down, or refusing the portal) is reported in
    ``cluster_error`` and leaves every job as it is: no job is marked failed because the
    API server was down; the lost work of step 4 is still found, since it needs only the
    database.
    """
    started = time.monotonic()
    report = ReconcileReport()
    lock = _lock()
    if not lock.acquire():
        report.skipped = True
        return report
    renewing = _renewed(lock)
    try:
        # Queue recovery needs only the database: it runs even when the cluster is down.
        _recover_queue(report)
        clusters = clusters_tracked()
        errors = []
        for index, cluster in enumerate(clusters):
            try:
                with kube.on_cluster(cluster.access_to()):
                    _track(report, cluster, first=cluster.name == settings.CLUSTER_NAME)
            except kube.ClusterError as exc:
                # Not an error of the jobs (an outage, refused credentials, a list the API
                # server refuses): tracking resumes at the next run, the other clusters'
                # jobs are tracked, and the lost work found above is still queued again.
                logger.warning(
                    "reconcile: cluster %s not read, its jobs left as they are: %s",
                    cluster.name,
                    exc,
                )
                cluster_unreachable(cluster_id=cluster.pk, message=exc.message)
                errors.append(f"{cluster.name}: {exc.message}" if index else exc.message)
            else:
                cluster_answered(cluster=cluster)
        report.cluster_error = "; ".join(errors)
    finally:
        renewing.set()
        try:
            lock.release()
        except redis.exceptions.LockError:
            logger.warning("reconcile lock expired before release (run took too long)")
        report.duration_seconds = time.monotonic() - started
    return report


def reconcile_requeue(report: ReconcileReport) -> None:
    """Queue the apply, admission and cleanup work a reconcile pass found lost."""
    for job_id in report.requeued_apply:
        tasks.job_apply_task.delay(job_id)
    for team_id in report.requeued_admission:
        tasks.admission_task.delay(team_id)
    for job_id in report.cleanup:
        tasks.job_cleanup_task.delay(job_id)
    for job_id in report.evictions:
        tasks.job_evict_task.delay(job_id)
    for job_id, evicted in report.node_failures.items():
        tasks.job_node_failure_task.delay(job_id, evicted)
