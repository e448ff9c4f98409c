"""Admission on Kueue (``bench_admission.py --engine kueue``): what the portal adds to Kueue's
own admission, and real Kueue's own admission rate on this machine in the same run.

1. *The portal on Kueue*, for 1,000 and 10,000 queued jobs across 50 teams in one cohort
   (8 ``nvidia.com/gpu`` nominal each, weights 1–3; jobs of 1–8 GPUs that run 2 minutes of
   cluster time): the portal's rows, the suspended Jobs and Kueue's configuration are
   seeded (Kueue's configuration by the portal's ``kueue_sync``, the Jobs through the API
   server), the local cluster (real Kueue; the ``large`` profile's nodes run by KWOK, each
   job's pods succeeding 12 s after they start) admits them, and the watch
   tracker runs in this process as ``manage.py track_cluster`` does. Measured while
   Kueue admits jobs as others finish:
   - *the portal's delay*: from a Workload turning ``Admitted`` (seen by a watch of this
     benchmark's own) to the job's row showing ``admitted_at`` (p50, p95; polled every
     50 ms, so up to 50 ms of each figure is the poll's);
   - *submit to the cluster*: ``job_submit`` then ``job_apply`` of new jobs, the portal's
     part before Kueue sees a job (median);
   - the tracker's API requests per minute (lists, gets, opened watches);
   - its catch-up: from its start to every followed job observed once (a restart's backlog;
     the delays are measured after it).
2. *Real Kueue alone*, the anchor: N Jobs (default 15,000) of 1–4 GPUs across 30
   ClusterQueues in one cohort, created through the API server, each running one second on
   the ``large`` profile's nodes run by KWOK, until every Workload has finished; admissions
   per second of wall time. Kueue's own scheduler performance test
   admits 15,000 workloads across 30 ClusterQueues in about 351 s (≈ 43/s) on its CI's
   machines. ``--kueue-workloads 0`` skips it.
"""

from __future__ import annotations

import io
import random
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.bench_tracking import counting
from bench.harness import Report

TEAMS = 50
NOMINAL = 8
SPEED = 10.0  # the simulated nodes' seconds per real second (part 1)
RUN = "120s"  # how long each job runs, in cluster time
KWOK_RUN = "12s"  # the same in real time, on KWOK's nodes (they have no simulated clock)
NODES = ("--nodes", "kwok")
WINDOW = 60.0  # real seconds of admissions measured per size


def _seed_portal(size: int) -> None:
    """50 teams in cohort ``bench`` and ``size`` queued jobs on Kueue, manifests built as
    the portal builds them (suspended, labelled for the team's LocalQueue)."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.utils import timezone

    from jobs.manifests import build_manifests, object_name
    from jobs.models import Job, JobState
    from jobs.services.submit import job_spec_check, manifest_context
    from teams.kueue_config import team_local_queue
    from teams.models import Cohort, GpuQuota, Membership, Team

    Job.objects.all().delete()
    # The demo's GPU catalog (the large profile's products), then teams of the benchmark's.
    call_command("seed_demo", verbosity=0, stdout=io.StringIO())
    Job.objects.all().delete()
    GpuQuota.objects.all().delete()
    Team.objects.all().delete()
    Cohort.objects.all().delete()
    owner, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True})
    cohort = Cohort.objects.create(slug="bench", name="Bench")
    teams = [
        Team.objects.create(
            slug=f"t{i:02d}",
            name=f"Team {i}",
            namespace=f"team-t{i:02d}",
            cohort=cohort,
            weight=1 + i % 3,
        )
        for i in range(TEAMS)
    ]
    for team in teams:
        GpuQuota.objects.create(team=team, resource="nvidia.com/gpu", limit=NOMINAL)
        Membership.objects.create(user=owner, team=team)
    rng = random.Random(7)
    now = timezone.now()
    rows, checks = [], []
    for i in range(size):
        team = teams[i % TEAMS]
        data = {
            "kind": "training",
            "team": team.slug,
            "name": f"j{i}",
            "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
            "command": ["python", "train.py"],
            "gpu": {"count": rng.choice([1, 2, 4, 8])},
            "priority": rng.choice(["low", "normal", "high"]),
            "env": {"SANDBOX_DURATION": RUN},
        }
        checked = job_spec_check(user=owner, data=data)
        spec = checked.spec
        rows.append(
            Job(
                team=team, owner=owner, name=spec.name, kind=spec.kind, priority=spec.priority,
                state=JobState.QUEUED, reason="Applied", message="", spec=spec.to_dict(),
                demand=checked.demand, gpu_count=spec.gpu.count * spec.pod_count,
                namespace=team.namespace, applied_at=now, queueing=Job.Queueing.KUEUE,
            )
        )  # fmt: skip
        checks.append(checked)
    created = Job.objects.bulk_create(rows, batch_size=1000)
    for job, checked in zip(created, checks, strict=True):
        on_kueue = replace(
            checked, queueing=Job.Queueing.KUEUE, kueue_queue=team_local_queue(checked.team)
        )
        ctx = manifest_context(on_kueue, job_id=job.pk)
        job.manifests = build_manifests(checked.spec, ctx)
        job.object_name = object_name(checked.spec, ctx)
    Job.objects.bulk_update(created, ["manifests", "object_name"], batch_size=500)


def _seed_cluster(proc: Any) -> None:
    """Kueue's configuration as the portal writes it (``kueue_sync``), then the jobs'
    objects, created through the running cluster's API server; Kueue admits as they come."""
    from bench.cluster_seed import create_all, keep_running_on_kwok
    from jobs.models import Job
    from teams.kueue_config import kueue_sync

    kueue_sync()
    rows = Job.objects.values_list("manifests", "namespace").iterator()
    created = create_all(
        proc.kubeconfig,
        ((ns, keep_running_on_kwok(m, KWOK_RUN)) for manifests, ns in rows for m in manifests),
    )
    _wait_for_workloads(proc, created)


def _wait_for_workloads(proc: Any, jobs: int) -> None:
    """Until Kueue has made a Workload for every Job created (its own backlog: at 10,000 it
    takes minutes, and measuring before it ends measures Kueue catching up, not the
    portal)."""
    from bench.cluster_seed import api_client

    client = api_client(proc.kubeconfig, 1)
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < 1800:
            listed = client.call_api(
                "/apis/kueue.x-k8s.io/v1beta2/workloads", "GET", auth_settings=["BearerToken"],
                query_params=[("limit", "1")], response_type="object",
                _return_http_data_only=True, _request_timeout=60,
            )  # fmt: skip
            meta = listed.get("metadata") or {}
            made = len(listed.get("items") or []) + int(meta.get("remainingItemCount") or 0)
            print(f"     Kueue made {made:,}/{jobs:,} Workloads", flush=True)
            if made >= jobs:
                return
            time.sleep(10)
    finally:
        client.close()


class AdmissionWatch:
    """The benchmark's own watch of Workloads: when each job's Workload last turned
    Admitted, by this process's clock (through the client directly, not the portal's
    adapter, so the tracker's API requests are counted alone). Real Kueue may preempt a
    Workload within a second of admitting it (fair sharing across the cohort) and admit it
    again later: the delay to the row counts from the admission that let the job start."""

    def __init__(self, jobs: dict[tuple[str, str], int]) -> None:
        self.jobs = jobs
        self.admitted: dict[int, float] = {}
        self.holding: set[int] = set()  # admitted now, as last seen
        self.evicted: set[tuple[int, str]] = set()  # (job, when), each eviction once
        # When Kueue last unsuspended each job's Job (its part: admitted → unsuspended;
        # the portal's: unsuspended → the row says admitted).
        self.unsuspended: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._jobs_thread = threading.Thread(target=self._run_jobs, daemon=True)

    def start(self) -> AdmissionWatch:
        self._thread.start()
        self._jobs_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _follow(self, group: str, version: str, plural: str, seen: Any, **query: Any) -> None:
        """List, then watch from the list's version, as an informer does: only changes
        stream (not every object again at each reconnect), and a watch the API server
        ends (410 Expired: this watcher fell behind) lists again. Plain dicts throughout
        (the custom-objects client serves any group's list), no typed objects."""
        from kubernetes import client, watch

        from cluster import kube

        api = client.CustomObjectsApi(kube.api_client())
        listed_version: str | None = None
        while not self._stop.is_set():
            try:
                if listed_version is None:
                    listed = api.list_cluster_custom_object(
                        group, version, plural, _request_timeout=300, **query
                    )
                    for item in listed.get("items") or []:
                        seen(item, listed=True)
                    listed_version = listed["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                    api.list_cluster_custom_object, group, version, plural,
                    resource_version=listed_version, timeout_seconds=30,
                    allow_watch_bookmarks=True, **query,
                ):  # fmt: skip
                    if self._stop.is_set():
                        return
                    if event["type"] == "ERROR":
                        listed_version = None  # expired: list again
                        break
                    obj = event["object"]
                    listed_version = obj["metadata"].get("resourceVersion") or listed_version
                    if event["type"] != "BOOKMARK":
                        seen(obj)
            except Exception:  # noqa: BLE001 - the cluster stopping under the watch, or a
                # broken stream: list again
                if self._stop.is_set():
                    return
                listed_version = None
                time.sleep(0.5)

    def _run(self) -> None:
        self._follow("kueue.x-k8s.io", "v1beta2", "workloads", self._seen)

    def _run_jobs(self) -> None:
        from cluster.labels import MANAGED_BY_SELECTOR

        suspended: dict[int, bool] = {}

        def seen(job: dict[str, Any], listed: bool = False) -> None:
            meta = job["metadata"]
            job_id = self.jobs.get((meta.get("namespace", ""), meta.get("name", "")))
            if job_id is None:
                return
            now_suspended = bool((job.get("spec") or {}).get("suspend"))
            if not listed and suspended.get(job_id, True) and not now_suspended:
                self.unsuspended[job_id] = time.monotonic()
            suspended[job_id] = now_suspended

        self._follow("batch", "v1", "jobs", seen, label_selector=MANAGED_BY_SELECTOR)

    def _seen(self, workload: dict[str, Any], listed: bool = False) -> None:
        owner: dict[str, Any] = next(iter(workload["metadata"].get("ownerReferences") or []), {})
        job_id = self.jobs.get((workload["metadata"]["namespace"], owner.get("name", "")))
        true = {
            c.get("type"): str(c.get("lastTransitionTime") or "")
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"
        }
        if job_id is None:
            return
        if "Admitted" in true and job_id not in self.holding:
            self.holding.add(job_id)
            self.admitted[job_id] = time.monotonic()
        elif "Admitted" not in true:
            self.holding.discard(job_id)
        if "Evicted" in true:
            self.evicted.add((job_id, true["Evicted"]))


def _delays(
    watcher: AdmissionWatch, seconds: float
) -> tuple[list[float], list[float], list[float]]:
    """For ``seconds``: each job Kueue admits, the time until its row says so; and, where the
    Job's unsuspension was seen between, the two parts: Kueue's, then the portal's."""
    from jobs.models import Job

    known = set(Job.objects.filter(admitted_at__isnull=False).values_list("pk", flat=True))
    delays: list[float] = []
    kueue: list[float] = []  # admitted → Kueue unsuspends the Job
    portal: list[float] = []  # unsuspended → the row says admitted (the tracker's part)
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        fresh = set(
            Job.objects.filter(admitted_at__isnull=False)
            .exclude(pk__in=known)
            .values_list("pk", flat=True)
        )
        now = time.monotonic()
        for pk in fresh:
            # Admitted by Kueue within the window (not a backlog from before it).
            if watcher.admitted.get(pk, 0.0) >= start:
                delays.append(now - watcher.admitted[pk])
                resumed = watcher.unsuspended.get(pk)
                if resumed is not None and resumed >= watcher.admitted[pk]:
                    kueue.append(resumed - watcher.admitted[pk])
                    portal.append(now - resumed)
        known |= fresh
        time.sleep(0.05)
    return sorted(delays), sorted(kueue), sorted(portal)


def _submit_to_cluster(count: int) -> list[float]:
    """Seconds from ``job_submit`` to the Job created in the cluster, for new jobs."""
    from django.contrib.auth.models import User

    from jobs.services.apply import job_apply
    from jobs.services.submit import job_submit

    owner = User.objects.get(username="bench")
    took = []
    for i in range(count):
        started = time.perf_counter()
        job = job_submit(
            user=owner,
            data={
                "kind": "training", "team": f"t{i % TEAMS:02d}", "name": f"new-{i}",
                "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
                "command": ["python", "train.py"], "gpu": {"count": 1},
                "env": {"SANDBOX_DURATION": RUN},
            },
        )  # fmt: skip
        job_apply(job_id=job.pk)
        took.append(time.perf_counter() - started)
    return took


def _percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, round(share * (len(values) - 1)))]


def portal_on_kueue(report: Report, sizes: list[int], workdir: Path) -> dict[int, dict[str, Any]]:
    from django.conf import settings
    from django.db import connection

    from cluster import kube
    from jobs.models import Job
    from jobs.tracking.reconcile import tracked_jobs
    from jobs.tracking.tracker import ClusterTracker
    from teams.cluster_sync import team_cluster_sync
    from teams.models import Team
    from tests.sandbox_process import SandboxProcess

    settings.QUEUEING, settings.KUEUE_MANAGED = "kueue", True
    results: dict[int, dict[str, Any]] = {}
    for size in sizes:
        print(f"  -- portal on Kueue, {size:,} queued: seeding", flush=True)
        _seed_portal(size)
        proc = SandboxProcess(workdir / f"kueue-{size}", "large", SPEED, NODES)
        proc.start()
        settings.KUBECONFIG, settings.KUBE_CONTEXT = str(proc.kubeconfig), ""
        settings.KUBE_REQUEST_TIMEOUT = 60.0
        kube.reset_client()
        try:
            for team_id in Team.objects.values_list("pk", flat=True):
                team_cluster_sync(team_id=team_id)
            _seed_cluster(proc)
            jobs = {
                (ns, name): pk
                for pk, ns, name in Job.objects.values_list("pk", "namespace", "object_name")
            }
            watcher = AdmissionWatch(jobs).start()
            tracker = ClusterTracker("bench-kueue")

            def run(tracker: ClusterTracker = tracker) -> None:
                try:
                    tracker.run()
                finally:
                    connection.close()

            with counting() as requests:
                started = time.perf_counter()
                thread = threading.Thread(target=run, daemon=True)
                thread.start()
                # Caught up once it has observed every job it follows after its first
                # lists (as bench_tracking measures it): a restarted tracker's backlog.
                while tracker.observed < tracked_jobs().count():
                    time.sleep(0.1)
                catch_up = time.perf_counter() - started
                before = requests.calls + requests.watches
                delays, kueue_part, portal_part = _delays(watcher, WINDOW)
                per_minute = round((requests.calls + requests.watches - before) * 60 / WINDOW)
            submit = _submit_to_cluster(20)
            tracker.stop()
            watcher.stop()
            thread.join(timeout=30)
        finally:
            proc.stop()
        if not delays:
            raise SystemExit(
                f"no admission seen in {WINDOW:.0f} s at {size:,} queued (the benchmark's "
                f"watch saw {len(watcher.admitted)}; rows admitted: "
                f"{Job.objects.filter(admitted_at__isnull=False).count()}; caught up in "
                f"{catch_up:.1f} s)"
            )
        results[size] = {
            "catch_up_s": round(catch_up, 1),
            "admitted_in_window": len(delays),
            # Kueue's preemptions over the whole run (fair sharing across the cohort).
            "kueue_evictions": len(watcher.evicted),
            "delay_p50_s": round(statistics.median(delays), 3),
            "delay_p95_s": round(_percentile(delays, 0.95), 3),
            # The two parts of it: Kueue unsuspending the admitted Job, then the tracker.
            "kueue_unsuspend_p50_s": round(statistics.median(kueue_part), 3)
            if kueue_part
            else None,
            "portal_p50_s": round(statistics.median(portal_part), 3) if portal_part else None,
            "portal_p95_s": round(_percentile(portal_part, 0.95), 3) if portal_part else None,
            "submit_to_cluster_ms": round(statistics.median(submit) * 1000, 1),
            "requests_per_min": per_minute,
        }
        report.row(
            f"portal on Kueue, {size:,} queued",
            baseline=f"portal on Kueue, {sizes[0]:,} queued" if size != sizes[0] else None,
            ratio_of="delay_p50_s",
            **results[size],
        )
    return results


def kueue_alone(report: Report, workloads: int, workdir: Path) -> dict[str, float]:
    """Real Kueue (with the real scheduler, Job controller and the simulated kubelets)
    admitting ``workloads`` Jobs of 1-4 GPUs across 30 ClusterQueues in one cohort, each
    running one minute of cluster time, with no portal: the anchor the portal's figures are
    read against, measured on this machine in this run."""
    from bench.cluster_seed import api_client, create_all, kwok_completes_after
    from tests.sandbox_process import SandboxProcess

    proc = SandboxProcess(workdir / "kueue-alone", "large", 60.0, NODES).start()
    try:
        api = "kueue.x-k8s.io/v1beta2"
        gpu_toleration = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        setup: list[tuple[str, dict[str, Any]]] = [
            ("", {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": "gpus"},
                  "spec": {"tolerations": gpu_toleration}}),
        ]  # fmt: skip
        for q in range(30):
            ns = f"perf-{q}"
            setup += [
                ("", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                ("", {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": ns},
                      "spec": {"namespaceSelector": {}, "cohortName": "perf",
                               "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                                   "flavors": [{"name": "gpus", "resources": [
                                   {"name": "nvidia.com/gpu", "nominalQuota": "32"}]}]}]}}),
                (ns, {"apiVersion": api, "kind": "LocalQueue",
                      "metadata": {"name": "q", "namespace": ns}, "spec": {"clusterQueue": ns}}),
            ]  # fmt: skip
        create_all(proc.kubeconfig, setup, threads=1)
        rng = random.Random(11)
        jobs = (
            (f"perf-{i % 30}",
             {"apiVersion": "batch/v1", "kind": "Job",
              "metadata": {"name": f"w{i}", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
              "spec": {"template": {
                  "metadata": {"annotations": {"sandbox.gpu-portal.dev/duration": "60s",
                                               **kwok_completes_after("1s")}},
                  "spec": {"restartPolicy": "Never", "tolerations": gpu_toleration,
                           "containers": [{"name": "main", "image": "busybox", "resources": {
                               "limits": {"nvidia.com/gpu": str(rng.choice([1, 2, 4]))}}}]}}}})
            for i in range(workloads)
        )  # fmt: skip
        started = time.perf_counter()
        create_all(proc.kubeconfig, jobs)
        created = time.perf_counter() - started
        client = api_client(proc.kubeconfig, 1)
        finished = 0
        while time.perf_counter() - started < 3600:
            listed = client.call_api(
                f"/apis/{api}/workloads", "GET", auth_settings=["BearerToken"],
                response_type="object", _return_http_data_only=True, _request_timeout=300,
            )  # fmt: skip
            finished = sum(
                any(c.get("type") == "Finished" and c.get("status") == "True"
                    for c in (w.get("status") or {}).get("conditions") or [])
                for w in listed.get("items") or []
            )  # fmt: skip
            print(f"     Kueue alone: {finished:,}/{workloads:,} finished", flush=True)
            if finished >= workloads:
                break
            time.sleep(10)
        wall = time.perf_counter() - started
        client.close()
    finally:
        proc.stop()
    figures: dict[str, Any] = {
        "workloads": workloads,
        "finished": finished,
        "created_in_s": round(created, 1),
        "wall_s": round(wall, 1),
        "admissions_per_s": round(finished / wall, 1),
    }
    report.row(f"real Kueue alone, {workloads:,} workloads / 30 ClusterQueues", **figures)
    return figures
