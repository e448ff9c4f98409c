"""Track the cluster from watch streams instead of listing it every few seconds.

The tracker (``manage.py track_cluster``) lists the portal's Jobs, Deployments and Pods
(by its label) and the cluster's Events once, then follows a watch of each from the
list's resourceVersion, keeping the objects in memory (an informer, as client-go's). A
change marks the portal jobs it concerns; a batch of marked jobs goes through
``reconcile.job_observe``, the same state transitions, timeline entries and advice the
periodic pass makes. So a change reaches the job page within about a second, and the
API server sees a handful of long-lived watches however many jobs there are.

- A watch that ends (its timeout) or drops resumes from the last version it saw; one the
  API server no longer keeps (410 Expired: a restart, or a long disconnect) lists again.
- Several trackers may run for availability: one leads, through a
  ``coordination.k8s.io/v1`` Lease (``TRACKER_LEASE_*``), renewed every third of its
  duration; the others wait and take over once it expires. A leader that fails to renew
  stops tracking before another can start.
- The periodic reconcile stays as the safety net: it catches what a watch missed and
  re-queues lost work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from cluster import kube
from cluster.labels import MANAGED_BY_SELECTOR
from cluster.launchers import owner_kinds
from cluster.models import Cluster
from cluster.services import (
    cluster_answered,
    cluster_first,
    cluster_unreachable,
    clusters_tracked,
)
from jobs.models import Job
from jobs.tracking.kueue import workload_owner
from jobs.tracking.reconcile import (
    TRACKED_FIELDS,
    Advisor,
    EventIndex,
    ReconcileReport,
    job_id_of,
    job_observe,
    known_event_keys,
    kueue_words_for,
    tracked_jobs,
)
from scheduling.k8s_time import parse_time

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)

WATCHED = ("Job", "Deployment", "Pod")  # the portal's objects, by its label
# Operators' objects the portal makes, where the cluster serves them.
OPERATORS = ("PyTorchJob", "TrainJob")
OWNERS = ("Job", "Deployment", *OPERATORS)  # what a portal job's pods belong to
KUEUE = ("Workload",)  # with QUEUEING=kueue: Kueue's Workloads, all of them


def _kueue_kinds() -> tuple[str, ...]:
    return KUEUE if settings.QUEUEING == "kueue" else ()


WATCH_SECONDS = 300  # a watch is reopened this often, from the last version seen
BATCH_PAUSE = 0.2  # seconds to gather changes into one batch of observations


class _Informer:
    """The tracked objects of every watched kind, and which portal job each belongs to.

    Jobs are observed only once every kind it watches has been listed (``synced``, as
    client-go's ``HasSynced``): a job whose pods are listed before its Job would look as
    if its objects had gone, and be marked Lost.
    """

    def __init__(self, kinds: tuple[str, ...] = (*WATCHED, *OPERATORS, *KUEUE, "Event")) -> None:
        self.lock = threading.Lock()
        self.kinds = kinds
        self.objects: dict[str, dict[Key, Obj]] = {
            k: {} for k in (*WATCHED, *OPERATORS, *KUEUE, "Event")
        }
        self.listed: set[str] = set()
        self.dirty: set[int] = set()
        self.changed = threading.Event()

    @property
    def synced(self) -> bool:
        with self.lock:
            return self.listed.issuperset(self.kinds)

    def _mark(self, job_id: int | None) -> None:
        if job_id is not None:
            self.dirty.add(job_id)
            self.changed.set()

    def replace(self, kind: str, items: list[Obj]) -> None:
        """A fresh list: every job whose objects it holds, or held, is looked at again."""
        with self.lock:
            before = self.objects[kind]
            self.objects[kind] = {_key(o): o for o in items}
            self.listed.add(kind)
            for obj in [*before.values(), *items]:
                self._mark(self._job_of(kind, obj))

    def apply(self, kind: str, change: str, obj: Obj) -> None:
        with self.lock:
            if change == "DELETED":
                self.objects[kind].pop(_key(obj), None)
            else:
                self.objects[kind][_key(obj)] = obj
            self._mark(self._job_of(kind, obj))

    def _job_of(self, kind: str, obj: Obj) -> int | None:
        if kind == "Workload":
            # Kueue copies none of the portal's labels: the job is its Job's (or Pod's).
            owner = workload_owner(obj)
            if owner is None or owner[0] not in (*OWNERS, "Pod"):
                return None
            found = self.objects[owner[0]].get(owner[1:])
            return job_id_of(found) if found is not None else None
        if kind != "Event":
            return job_id_of(obj)
        # Events carry no labels: the job is the one owning the object they are about
        # (a Deployment's ReplicaSets are named "<deployment>-<hash>").
        involved = obj.get("involvedObject") or {}
        ns, name = str(involved.get("namespace") or ""), str(involved.get("name") or "")
        for candidate in (name, name.rpartition("-")[0]):
            for owner_kind in OWNERS:
                found = self.objects[owner_kind].get((ns, candidate))
                if found is not None:
                    return job_id_of(found)
        return None

    def take_dirty(self) -> set[int]:
        with self.lock:
            dirty, self.dirty = self.dirty, set()
            self.changed.clear()
            return dirty

    def view(self, job_ids: set[int]) -> tuple[dict[int, list[Obj]], dict[int, list[Obj]]]:
        """(workload objects, pods) of each job."""
        owners: dict[int, list[Obj]] = defaultdict(list)
        pods: dict[int, list[Obj]] = defaultdict(list)
        with self.lock:
            for kind in OWNERS:
                for obj in self.objects[kind].values():
                    job_id = job_id_of(obj)
                    if job_id in job_ids:
                        owners[job_id].append(obj)
            for obj in self.objects["Pod"].values():
                job_id = job_id_of(obj)
                if job_id in job_ids:
                    pods[job_id].append(obj)
        return owners, pods

    def kueue_view(self) -> dict[int, list[Obj]]:
        """Kueue's Workloads of each job the portal has in the cluster."""
        found: dict[int, list[Obj]] = defaultdict(list)
        with self.lock:
            for obj in self.objects["Workload"].values():
                job_id = self._job_of("Workload", obj)
                if job_id is not None:
                    found[job_id].append(obj)
        return found

    def events_in(self, namespaces: set[str]) -> list[Obj]:
        with self.lock:
            return [o for k, o in self.objects["Event"].items() if k[0] in namespaces]


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


# --- leader election -----------------------------------------------------------------------


def _micro(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderLease:
    """A ``coordination.k8s.io/v1`` Lease held by one tracker at a time. Acquire and renew
    are conditional updates on the Lease's resourceVersion: two trackers racing for an
    expired lease cannot both win (the loser gets 409 Conflict)."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.namespace = str(settings.TRACKER_LEASE_NAMESPACE)
        self.name = str(settings.TRACKER_LEASE_NAME)
        self.seconds = float(settings.TRACKER_LEASE_SECONDS)

    def try_hold(self) -> bool:
        """Acquire the lease, or renew it if ours; False when another holder's is live."""
        now = timezone.now()
        try:
            lease = kube.get("Lease", self.name, self.namespace)
        except kube.ObjectNotFound:
            try:
                kube.create(self._manifest(now, acquired=now, transitions=0))
            except kube.ObjectConflict:
                return False
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime")) or datetime.min.replace(tzinfo=UTC)
        duration = timedelta(seconds=float(spec.get("leaseDurationSeconds") or self.seconds))
        if holder != self.identity and renewed + duration > now:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        acquired = parse_time(spec.get("acquireTime")) if holder == self.identity else now
        wanted = self._manifest(now, acquired=acquired or now, transitions=transitions)
        wanted["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
        try:
            kube.replace(wanted)
        except kube.ObjectConflict:
            return False
        return True

    def _manifest(self, now: datetime, *, acquired: datetime, transitions: int) -> Obj:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.seconds)),
                "acquireTime": _micro(acquired),
                "renewTime": _micro(now),
                "leaseTransitions": transitions,
            },
        }


# --- the tracker ---------------------------------------------------------------------------


class ClusterTracker:
    """Lead (or wait to), then watch and observe until ``stop()``."""

    def __init__(
        self,
        identity: str,
        *,
        on_report: Callable[[ReconcileReport], None] | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        # One tracker per cluster, its lease in that cluster; the first cluster's by default.
        self.cluster = cluster if cluster is not None else cluster_first()
        self.first = self.cluster.name == settings.CLUSTER_NAME
        self.lease = LeaderLease(identity)
        self.on_report = on_report
        self._stop = threading.Event()
        self.leading = threading.Event()
        self.observed = 0  # jobs observed since start (tests and logs read it)
        # Its lease was last not reached (at start: a mark left from before is cleared once
        # it answers).
        self._unreachable = True

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        with kube.on_cluster(self.cluster.access_to()):
            self._run()

    def _run(self) -> None:
        """1. Wait until this tracker holds the lease (trying every few seconds).
        2. While it holds it: watch every kind in its own thread, observe marked jobs in
           batches once every kind has been listed, and renew the lease every third of
           its duration.
        3. A renewal that fails ends this term: watches stop, and the tracker waits for
           the lease again (another tracker may hold it by then).
        """
        renew_every = self.lease.seconds / 3
        while not self._stop.is_set():
            if not self._hold():
                self._stop.wait(renew_every)
                continue
            self.leading.set()
            logger.info("tracker %s leads", self.lease.identity)
            term = threading.Event()
            operators = owner_kinds()
            informer = _Informer((*WATCHED, *operators, *_kueue_kinds(), "Event"))
            threads = [
                threading.Thread(target=self._watch_loop, args=(kind, informer, term), daemon=True)
                for kind in informer.kinds
            ]
            for thread in threads:
                thread.start()
            next_renewal = time.monotonic() + renew_every
            try:
                while not self._stop.is_set():
                    if informer.synced:
                        informer.changed.wait(BATCH_PAUSE)
                        self._observe(informer)
                    else:
                        self._stop.wait(BATCH_PAUSE)
                    if time.monotonic() >= next_renewal:
                        if not self._hold():
                            logger.warning("tracker %s lost the lease", self.lease.identity)
                            break
                        if owner_kinds() != operators:
                            # An operator was installed or removed: watch what is served now.
                            logger.info("tracker %s: operators now %s", self.lease.identity,
                                        owner_kinds())  # fmt: skip
                            break
                        next_renewal = time.monotonic() + renew_every
            finally:
                term.set()
                self.leading.clear()
                # A watch blocked on a quiet stream ends with its next event or timeout:
                # wait a few seconds in all for them, not a few each.
                deadline = time.monotonic() + 5
                for thread in threads:
                    thread.join(timeout=max(0.0, deadline - time.monotonic()))
                close_old_connections()

    def _hold(self) -> bool:
        try:
            held = self.lease.try_hold()
        except kube.ClusterError as exc:
            logger.warning("tracker of %s: lease not reached: %s", self.cluster.name, exc)
            # Said on the cluster's row at once (the reconcile says it too, on its period);
            # its jobs keep their states.
            self._unreachable = True
            self._say(cluster_unreachable, cluster_id=self.cluster.pk, message=exc.message)
            return False
        if self._unreachable:
            self._unreachable = False
            self.cluster.refresh_from_db(fields=["unreachable_since", "last_error"])
            self._say(cluster_answered, cluster=self.cluster)
        return held

    @staticmethod
    def _say(write: Callable[..., None], **kwargs: Any) -> None:
        try:
            write(**kwargs)
        except DatabaseError:
            logger.exception("tracker: the cluster's state not written")
            connection.close()

    def _watch_loop(self, kind: str, informer: _Informer, term: threading.Event) -> None:
        with kube.on_cluster(self.cluster.access_to()):  # a thread starts unbound
            self._watch(kind, informer, term)

    def _watch(self, kind: str, informer: _Informer, term: threading.Event) -> None:
        """List, then watch from the list's version; resume after a drop, relist after a
        410; back off (up to 30 s) while the API server cannot be reached."""
        selector = None if kind in ("Event", *KUEUE) else MANAGED_BY_SELECTOR
        version: str | None = None
        backoff = 1.0
        while not term.is_set() and not self._stop.is_set():
            try:
                if version is None:
                    items, version = kube.list_with_version(kind, label_selector=selector)
                    informer.replace(kind, items)
                for change, obj in kube.watch(
                    kind,
                    resource_version=version,
                    label_selector=selector,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    if term.is_set() or self._stop.is_set():
                        return
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if change != "BOOKMARK":
                        informer.apply(kind, change, obj)
                backoff = 1.0
            except kube.WatchExpired:
                logger.info("watch of %s expired at %s: listing again", kind, version)
                version = None
            except kube.ClusterError as exc:
                logger.warning("watch of %s interrupted (%s); resuming", kind, exc)
                term.wait(backoff)
                backoff = min(30.0, backoff * 2)

    def _observe(self, informer: _Informer) -> None:
        """Bring the marked jobs' rows in line with what the informer holds."""
        dirty = informer.take_dirty()
        if not dirty:
            return
        report = ReconcileReport()
        try:
            placed = tracked_jobs().on_cluster(self.cluster.pk, first=self.first)
            jobs = list(placed.filter(pk__in=dirty).only(*TRACKED_FIELDS))
            if jobs:
                owners, pods = informer.view({j.pk for j in jobs})
                # Every job's Workloads, in one scan: the marked jobs' own, and the others'
                # for who preempted whom (told by the victims' Workloads).
                kueue = informer.kueue_view()
                events = EventIndex(informer.events_in({j.namespace for j in jobs}))
                known = known_event_keys(Job.objects.filter(pk__in=[j.pk for j in jobs]))
                advisor, now = Advisor(), timezone.now()
                followed = any(kueue.get(j.pk) for j in jobs)
                words = kueue_words_for(kueue, self.cluster) if followed else None
                for job in jobs:
                    job_observe(
                        job,
                        workload=owners.get(job.pk, []),
                        pods=pods.get(job.pk, []),
                        events=events.for_job(
                            job, owners.get(job.pk, []) + kueue[job.pk], pods.get(job.pk, [])
                        ),
                        known_events=known[job.pk],
                        advisor=advisor,
                        report=report,
                        now=now,
                        kueue_workloads=kueue[job.pk],
                        kueue_words=words,
                    )
                self.observed += len(jobs)
        except Exception:
            # A database hiccup must not end tracking: the jobs are looked at again.
            logger.exception("tracker: observing %d jobs failed", len(dirty))
            with informer.lock:
                informer.dirty |= dirty
            connection.close()
            return
        if self.on_report is not None:
            self.on_report(report)


# --- one tracker per cluster ---------------------------------------------------------------


Reached = tuple[int, str, str, str, str]


def _reached(cluster: Cluster) -> Reached:
    """What a running tracker depends on: the cluster, and how it is reached."""
    return (cluster.pk, cluster.name, cluster.access, cluster.kubeconfig_path, cluster.kube_context)


class TrackerSupervisor:
    """``manage.py track_cluster``: one ``ClusterTracker`` (in a thread) per cluster that is
    not disabled. Each ``step()`` looks at the clusters again: one added or enabled in the
    admin gets its tracker, one disabled, removed or reached differently now loses it (and
    gets a new one), one whose tracker ended on an error gets another."""

    def __init__(self, make: Callable[[Cluster], ClusterTracker]) -> None:
        self.make = make
        self.running: dict[
            tuple[int, str, str, str, str], tuple[ClusterTracker, threading.Thread]
        ] = {}

    def step(self) -> None:
        try:
            wanted = {_reached(c): c for c in clusters_tracked()}
        except DatabaseError:
            logger.exception("tracker: the clusters could not be read; looking again later")
            connection.close()
            return
        for key in [k for k, (_, thread) in self.running.items() if not thread.is_alive()]:
            self.running.pop(key)  # it ended on an error (logged): started again below
        for key in set(self.running) - set(wanted):
            tracker, thread = self.running.pop(key)
            tracker.stop()
            thread.join(timeout=10)
            logger.info("tracker of cluster %s stopped", key[1])
        for key, cluster in wanted.items():
            if key not in self.running:
                tracker = self.make(cluster)
                thread = threading.Thread(
                    target=_run_tracker, args=(tracker,), name=f"track-{cluster.name}", daemon=True
                )
                thread.start()
                self.running[key] = (tracker, thread)
                logger.info("tracking cluster %s", cluster.name)

    def stop(self) -> None:
        for tracker, _ in self.running.values():
            tracker.stop()
        for _, thread in self.running.values():
            thread.join(timeout=10)
        self.running.clear()


def _run_tracker(tracker: ClusterTracker) -> None:
    try:
        tracker.run()
    except Exception:
        logger.exception("tracker of cluster %s ended", tracker.cluster.name)
    finally:
        connection.close()
