"""How soon does a change in the cluster reach the job's row, and what does following the
cluster cost the API server: the watch tracker against the list-every-10-s reconcile.

    .venv/bin/python bench/bench_tracking.py [--sizes 1000 10000] [--changed 0.01]

The cluster is the local cluster (the real control plane) with the ``large`` profile's
nodes run by KWOK (``--nodes kwok``: the pods run until deleted; what is measured is the API
server and the portal, not the nodes), seeded as ``bench_reconcile`` seeds it: N running
jobs, portal rows and objects. For each size and each path:

1. the path catches up with the seeded cluster (the tracker: its lists and the
   observation of every job; the reconcile: one pass);
2. 1 % of the jobs have their Kubernetes Job deleted behind the portal's back (a change
   every path must notice: the job is then marked ``Lost``);
3. for each such job, the time from its DELETE to its row turning ``failed`` (p50, p95,
   max); the list path runs a pass every 10 s, as beat does by default without a tracker;
4. API requests per minute in the steady state that follows (one minute, nothing changing):
   lists and gets counted at the adapter, and each (re)opened watch.

Baseline: the same figures at the smallest size. The tracker runs in this process, in
threads, as ``manage.py track_cluster`` runs it.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_reconcile import EVENT_TTL, seed_cluster, seed_portal, warm_up
from bench.harness import Report, django_setup, start

LIST_INTERVAL = 10.0  # the reconcile's period without a tracker (RECONCILE_INTERVAL_SECONDS)
STEADY_SECONDS = 60.0


class Requests:
    """API requests made through the adapter: calls (lists, gets, deletes) and watches."""

    def __init__(self) -> None:
        self.calls = 0
        self.watches = 0
        self.lock = threading.Lock()


@contextmanager
def counting() -> Iterator[Requests]:
    from cluster import kube

    counted = Requests()
    call, watch = kube._call, kube.watch

    def counting_call(method: Any, *args: Any, **kwargs: Any) -> Any:
        with counted.lock:
            counted.calls += 1
        return call(method, *args, **kwargs)

    def counting_watch(*args: Any, **kwargs: Any) -> Any:
        with counted.lock:
            counted.watches += 1
        return watch(*args, **kwargs)

    kube._call, kube.watch = counting_call, counting_watch
    try:
        yield counted
    finally:
        kube._call, kube.watch = call, watch


def change_and_measure(job_ids: list[int], tick: Any, timeout: float = 120.0) -> list[float]:
    """Delete the workload (Job or Deployment) of each of these portal jobs behind the
    portal's back, spread over one list period (so the list path's latencies cover every
    phase of it), and return the seconds from each DELETE to its row turning failed
    (``Lost``). ``tick`` runs between looks: the list path's passes."""
    from cluster import kube
    from jobs.models import Job, JobState

    jobs = list(Job.objects.filter(pk__in=job_ids).only("kind", "namespace", "object_name"))
    gap = LIST_INTERVAL / max(1, len(jobs))
    deleted: dict[int, float] = {}
    seen: dict[int, float] = {}
    next_delete = time.time()
    deadline = time.time() + LIST_INTERVAL + timeout
    while len(seen) < len(jobs) and time.time() < deadline:
        if len(deleted) < len(jobs) and time.time() >= next_delete:
            job = jobs[len(deleted)]
            kind = "Job" if job.kind == Job.Kind.TRAINING else "Deployment"
            kube.delete(kind, job.object_name, job.namespace, propagation="Background")
            deleted[job.pk] = time.time()
            next_delete += gap
        tick()
        waiting = [pk for pk in deleted if pk not in seen]
        if waiting:
            lost = Job.objects.filter(pk__in=waiting, state=JobState.FAILED)
            now = time.time()
            for pk in lost.values_list("pk", flat=True):
                seen[pk] = now - deleted[pk]
        time.sleep(0.02)
    if len(seen) < len(jobs):
        raise SystemExit(f"only {len(seen)} of {len(jobs)} changes arrived")
    return sorted(seen.values())


def figures(latencies: list[float]) -> dict[str, float]:
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    return {
        "p50_s": round(statistics.median(latencies), 3),
        "p95_s": round(p95, 3),
        "max_s": round(max(latencies), 3),
    }


def run_tracker(size: int, changed: list[int]) -> dict[str, Any]:
    from django.db import connection

    from jobs.models import Job
    from jobs.tracking.reconcile import tracked_jobs
    from jobs.tracking.tracker import ClusterTracker

    tracker = ClusterTracker("bench-tracker")

    def run() -> None:
        try:
            tracker.run()
        finally:
            connection.close()

    with counting() as requests:
        started = time.perf_counter()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        # Caught up once every tracked job was observed after the first lists.
        while tracker.observed < tracked_jobs().count():
            time.sleep(0.1)
        catch_up = time.perf_counter() - started
        latencies = change_and_measure(changed, tick=lambda: None)
        before = (requests.calls, requests.watches)
        time.sleep(STEADY_SECONDS)
        steady = round(
            ((requests.calls - before[0]) + (requests.watches - before[1])) * 60 / STEADY_SECONDS
        )
    tracker.stop()
    thread.join(timeout=30)
    assert Job.objects.filter(pk__in=changed, reason="Lost").count() == len(changed)
    return {"catch_up_s": round(catch_up, 2), **figures(latencies), "requests_per_min": steady}


def run_lists(size: int, changed: list[int]) -> dict[str, Any]:
    from jobs.tracking.reconcile import cluster_reconcile

    with counting() as requests:
        started = time.perf_counter()
        cluster_reconcile()
        catch_up = time.perf_counter() - started
        last = [time.time()]

        def beat() -> None:
            if time.time() - last[0] >= LIST_INTERVAL:
                last[0] = time.time()
                cluster_reconcile()

        latencies = change_and_measure(changed, tick=beat)
        before = requests.calls
        end = time.time() + STEADY_SECONDS
        while time.time() < end:
            beat()
            time.sleep(0.2)
        steady = round((requests.calls - before) * 60 / STEADY_SECONDS)
    return {"catch_up_s": round(catch_up, 2), **figures(latencies), "requests_per_min": steady}


def run_size(report: Report, size: int, share: float, workdir: Path) -> dict[str, Any]:
    from django.conf import settings

    from cluster import kube
    from jobs.models import Job
    from teams.cluster_sync import team_cluster_sync
    from teams.models import Team
    from tests.sandbox_process import SandboxProcess

    print(f"  -- {size:,} jobs: seeding", flush=True)
    seed_portal(size, 0.0)
    results: dict[str, dict[str, Any]] = {}
    for path in ("lists every 10 s", "watch tracker"):
        proc = SandboxProcess(
            workdir / f"sandbox-{size}-{len(results)}",
            "large",
            1.0,
            ("--event-ttl", EVENT_TTL, "--nodes", "kwok"),
        )
        proc.start()
        settings.KUBECONFIG = str(proc.kubeconfig)
        settings.KUBE_CONTEXT = ""
        settings.KUBE_REQUEST_TIMEOUT = 60.0
        settings.LOST_GRACE_SECONDS = 0
        kube.reset_client()
        try:
            for team_id in Team.objects.values_list("pk", flat=True):
                team_cluster_sync(team_id=team_id)
            Job.objects.update(state="pending", reason="Applied", message="", finished_at=None)
            seed_cluster(proc)
            warm_up()
            ids = list(Job.objects.order_by("pk").values_list("pk", flat=True))
            changed = ids[:: max(1, round(1 / share))][: max(1, round(size * share))]
            runner = run_lists if path.startswith("lists") else run_tracker
            results[path] = runner(size, changed)
            print(f"     {path}: {results[path]}", flush=True)
        finally:
            proc.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--steady", type=float, default=60.0, help="steady-state seconds")
    args = parser.parse_args()
    global STEADY_SECONDS
    STEADY_SECONDS = args.steady
    sizes = sorted(args.sizes)
    django_setup(
        "gpu_portal_bench_tracking",
        redis_db=8,
        LOST_GRACE_SECONDS="0",
        STALE_QUEUE_SECONDS="3600",
    )
    report = start(
        "tracking",
        "From a change in the cluster to the job's row: watches vs lists every 10 s",
        sizes=sizes,
        changed=args.changed,
        profile="large (500 GPU nodes × 8 GPUs, 40 CPU nodes), run by KWOK",
        steady_seconds=args.steady,
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    results: dict[int, dict[str, Any]] = {}
    try:
        for size in sizes:
            results[size] = run_size(report, size, args.changed, workdir)
            for path, row in results[size].items():
                case, smallest = f"{size:,} jobs, {path}", f"{sizes[0]:,} jobs, {path}"
                report.row(
                    case,
                    baseline=smallest if size != sizes[0] else None,
                    ratio_of="p95_s",
                    **row,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    large = sizes[-1]
    watch, lists = results[large]["watch tracker"], results[large]["lists every 10 s"]
    report.goal(
        f"a change reaches the row within 2 s (p95) with {large:,} tracked jobs",
        met=watch["p95_s"] <= 2.0,
        value=f"{watch['p95_s']} s with watches, {lists['p95_s']} s with lists every 10 s",
    )
    small_watch = results[sizes[0]]["watch tracker"]
    report.goal(
        "API requests per minute in the steady state do not grow with the jobs",
        met=watch["requests_per_min"] <= small_watch["requests_per_min"] + 4,
        value=f"watches: {small_watch['requests_per_min']} → {watch['requests_per_min']}; "
        f"lists: {results[sizes[0]]['lists every 10 s']['requests_per_min']} → "
        f"{lists['requests_per_min']}",
    )
    report.finish()


if __name__ == "__main__":
    main()
