"""What does one reconcile pass cost with 1,000 and 10,000 tracked jobs?

    .venv/bin/python bench/bench_reconcile.py [--sizes 1000 10000] [--changed 0.01]

The cluster is the local cluster — the real kube-apiserver, etcd, controllers and scheduler —
with the ``large`` profile's simulated nodes (500 GPU nodes × 8 GPUs and 40 CPU nodes),
reached only through the official client. For each size:

1. the teams' namespaces, quotas and PriorityClasses are bootstrapped through the portal;
2. N jobs (1-GPU training, time-sliced and MIG inference, CPU-only training) get portal rows
   and their real manifests, created through the API server (``bench/cluster_seed.py``, 16
   requests at once) and run by the real controllers, scheduler and simulated kubelets
   until every pod runs;
3. pass 1 catches the rows up (everything changed), pass 2 finds nothing changed;
4. the cluster is stopped, its nodes' simulated clock moved 7 hours on so the 1 % of jobs
   that run 6 hours finish (the real Job controller writes their conditions), restarted
   and warmed up (``warm_up``: one list of each kind, as a long-running API server's
   watch cache would already hold);
5. pass 3 — the figure that matters — sees 1 % changed.

Per pass: wall time, split into time waiting on the API server (requests, including the
client's JSON decoding) and the portal's own time; SQL statements; Kubernetes API calls (HTTP
requests, pages included); rows written (INSERT/UPDATE row counts). Baseline: the same pass
at the smaller size.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Report, django_setup, start

SHAPES: list[tuple[str, float, dict[str, Any]]] = [
    # (label, share of jobs, spec without team/name). At 10,000 jobs every pod fits the large
    # profile: 3,350 of 3,360 whole A100/H100 GPUs, 1,250 of 1,280 T4 slices, 1,050 of 1,120
    # MIG 1g.10gb slices, 4,350 of the CPU nodes' 4,400 pod slots.
    (
        "train-1gpu",
        0.335,
        {
            "kind": "training",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "gpu": {"count": 1},
            "cpu": "4",
            "memory": "32Gi",
        },
    ),
    (
        "serve-shared",
        0.125,
        {
            "kind": "inference",
            "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
            "gpu": {"count": 1, "sharing": "shared"},
            "replicas": 1,
            "port": 8000,
        },
    ),
    (
        "serve-mig",
        0.105,
        {
            "kind": "inference",
            "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
            "gpu": {"count": 1, "sharing": "mig", "mig_profile": "1g.10gb"},
            "replicas": 1,
            "port": 8000,
        },
    ),
    (
        "cpu-prep",
        0.435,
        {
            "kind": "training",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "gpu": {"count": 0},
            "cpu": "250m",
            "memory": "1Gi",
        },
    ),
]
LONG = "90d"  # jobs that outlive the benchmark
SHORT = "6h"  # the 1 % that finish between pass 2 and pass 3
EVENT_TTL = str(30 * 86400)  # keep every event: the clock jumps hours in step 4
WARM_UP_REST_SECONDS = 3.0


@dataclass
class PassFigures:
    wall_s: float
    api_s: float
    queries: int
    api_calls: int
    rows_written: int
    jobs_updated: int
    events_added: int
    api_by_method: dict[str, list[float]]
    gc_s: float


class Counters:
    """SQL statements, rows written and API calls made while active."""

    def __init__(self) -> None:
        self.queries = 0
        self.rows_written = 0
        self.api_calls = 0
        self.api_seconds = 0.0
        # Per list method (e.g. "list_pod_for_all_namespaces"): [requests, seconds].
        self.by_method: dict[str, list[float]] = {}
        self.gc_seconds = 0.0  # in Python's cyclic garbage collector
        self._gc_started = 0.0

    def gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._gc_started

    def sql(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        self.queries += 1
        verb = sql.lstrip().split(None, 1)[0].upper()
        if verb in {"INSERT", "UPDATE", "DELETE"}:
            self.rows_written += max(context["cursor"].rowcount, 0)
        return result


@contextmanager
def counting() -> Iterator[Counters]:
    from django.db import connection

    from cluster import kube

    counters = Counters()
    original = kube._call

    def counted(method: Any, *args: Any, **kwargs: Any) -> Any:
        counters.api_calls += 1
        started = time.perf_counter()
        try:
            return original(method, *args, **kwargs)
        finally:
            elapsed = time.perf_counter() - started
            counters.api_seconds += elapsed
            tally = counters.by_method.setdefault(getattr(method, "__name__", "?"), [0, 0.0])
            tally[0] += 1
            tally[1] += elapsed

    kube._call = counted
    gc.callbacks.append(counters.gc)
    try:
        with connection.execute_wrapper(counters.sql):
            yield counters
    finally:
        kube._call = original
        gc.callbacks.remove(counters.gc)


def one_pass(profile: Path | None = None) -> PassFigures:
    """One reconcile pass, counted; with ``profile``, also under cProfile (stats saved there)."""
    from jobs.tracking.reconcile import cluster_reconcile

    profiler = cProfile.Profile() if profile else None
    with counting() as counters:
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        report = cluster_reconcile()
        if profiler:
            profiler.disable()
        wall = time.perf_counter() - started
    if profiler and profile:
        profiler.dump_stats(profile)
        pstats.Stats(str(profile)).sort_stats("cumulative").print_stats(30)
    if report.skipped:
        raise SystemExit("reconcile was skipped: another run holds the lock")
    return PassFigures(
        wall,
        counters.api_seconds,
        counters.queries,
        counters.api_calls,
        counters.rows_written,
        len(report.updated),
        report.events_added,
        counters.by_method,
        counters.gc_seconds,
    )


def warm_up() -> None:
    """After seeding or a restart: one untimed LIST of each kind, then a few seconds' rest.

    The restart is this benchmark's artefact (the nodes' clock can only be moved while the
    cluster is stopped); a real API server has been up all along, its watch cache warm and
    its controllers settled. The portal's rows are not touched: the timed pass still finds
    every change since the previous one.
    """
    from cluster import kube
    from cluster.labels import MANAGED_BY_SELECTOR
    from jobs.models import Job

    for kind in ("Job", "Deployment", "Pod"):
        for _ in kube.list_all(kind, label_selector=MANAGED_BY_SELECTOR):
            pass
    for namespace in sorted(set(Job.objects.values_list("namespace", flat=True))):
        for _ in kube.list_all("Event", namespace=namespace):
            pass
    time.sleep(WARM_UP_REST_SECONDS)


def seed_portal(size: int, changed: float) -> tuple[list[int], int]:
    """Portal rows for ``size`` applied jobs; returns (ids of the jobs that will finish, GPUs)."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from jobs.manifests import build_manifests, object_name
    from jobs.models import Job, JobEvent, JobState
    from jobs.services.submit import job_spec_check, manifest_context
    from teams.models import Team
    from teams.services import quota_set

    Job.objects.all().delete()
    call_command("seed_demo", verbosity=0, stdout=io.StringIO())
    teams = list(Team.objects.order_by("slug"))
    for team in teams:
        for resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"):
            quota_set(actor=None, team=team, resource=resource, limit=10_000)
    admin = get_user_model().objects.get(username="admin")
    finishing_every = round(1 / changed) if changed else 0
    now = timezone.now()
    rows: list[Job] = []
    plans: list[tuple[Any, Any]] = []
    index = 0
    for label, share, template in SHAPES:
        for k in range(round(size * share)):
            team = teams[index % len(teams)]
            finishes = bool(finishing_every) and index % finishing_every == 0
            data = {
                **template,
                "team": team.slug,
                "name": f"{label}-{k}",
                "env": {
                    "SANDBOX_DURATION": SHORT
                    if finishes and template["kind"] == "training"
                    else LONG
                },
            }
            checked = job_spec_check(user=admin, data=data)
            spec = checked.spec
            rows.append(
                Job(
                    team=team,
                    owner=admin,
                    name=spec.name,
                    kind=spec.kind,
                    priority=spec.priority,
                    state=JobState.PENDING,
                    reason="Applied",
                    message="Objects created in the cluster.",
                    spec=spec.to_dict(),
                    demand=checked.demand,
                    gpu_count=spec.gpu.count * spec.pod_count,
                    namespace=team.namespace,
                    admitted_at=now,
                    applied_at=now,
                )
            )
            plans.append((checked, finishes))
            index += 1
    created = Job.objects.bulk_create(rows, batch_size=1000)
    finishing: list[int] = []
    for job, (checked, finishes) in zip(created, plans, strict=True):
        ctx = manifest_context(checked, job_id=job.pk)
        job.manifests = build_manifests(checked.spec, ctx)
        job.object_name = object_name(checked.spec, ctx)
        if finishes:
            finishing.append(job.pk)
    Job.objects.bulk_update(created, ["manifests", "object_name"], batch_size=500)
    JobEvent.objects.bulk_create(
        [JobEvent(job=job, reason="Submitted", message="Submitted by admin.") for job in created],
        batch_size=2000,
    )
    return finishing, sum(job.gpu_count for job in created)


def seed_cluster(proc: Any) -> dict[str, int]:
    """Create the jobs' objects through the running local cluster's API server and wait until
    the real controllers, scheduler and simulated kubelets have every pod running."""
    from bench.cluster_seed import create_all, keep_running_on_kwok, wait_pods_settled
    from cluster.labels import MANAGED_BY_SELECTOR
    from jobs.models import Job

    rows = list(Job.objects.values_list("manifests", "namespace"))
    made = create_all(
        proc.kubeconfig,
        ((ns, keep_running_on_kwok(manifest)) for manifests, ns in rows for manifest in manifests),
    )
    pods = sum(
        int(m["spec"].get("replicas", 1)) if m["kind"] == "Deployment" else 1
        for manifests, _ in rows
        for m in manifests
        if m["kind"] in ("Job", "Deployment")
    )
    return {"objects": made, **wait_pods_settled(proc.kubeconfig, MANAGED_BY_SELECTOR, pods)}


def finish_some(proc: Any, finishing: list[int], hours: float = 7) -> dict[str, int]:
    """Stop the cluster, move the simulated nodes' clock ``hours`` on so the short training
    jobs among ``finishing`` end, start it again and wait until their pods have succeeded
    and the rest run."""
    from bench.cluster_seed import jump_node_clock, wait_pods_settled
    from cluster.labels import MANAGED_BY_SELECTOR
    from jobs.models import Job

    short = Job.objects.filter(pk__in=finishing, kind="training").count()
    proc.stop()
    jump_node_clock(proc.state, hours * 3600)
    proc.start(reset=False)
    return wait_pods_settled(proc.kubeconfig, MANAGED_BY_SELECTOR, 0, succeeded=short)


def run_size(
    report: Report, size: int, changed: float, workdir: Path, profile: bool = False
) -> dict[str, PassFigures]:
    from django.conf import settings

    from cluster import kube
    from teams.cluster_sync import team_cluster_sync
    from teams.models import Team
    from tests.sandbox_process import SandboxProcess

    print(f"  -- {size:,} jobs: seeding", flush=True)
    seed_started = time.perf_counter()
    finishing, gpus = seed_portal(size, changed)
    proc = SandboxProcess(workdir / f"sandbox-{size}", "large", 1.0, ("--event-ttl", EVENT_TTL))
    proc.start()
    settings.KUBECONFIG = str(proc.kubeconfig)
    settings.KUBE_CONTEXT = ""
    settings.KUBE_REQUEST_TIMEOUT = 60.0
    kube.reset_client()
    try:
        for team_id in Team.objects.values_list("pk", flat=True):
            team_cluster_sync(team_id=team_id)
        cluster = seed_cluster(proc)
        print(
            f"     cluster: {cluster['pods']:,} pods ({cluster['running']:,} running), "
            f"{gpus:,} GPUs in use; seeded in {time.perf_counter() - seed_started:.0f} s",
            flush=True,
        )
        warm_up()
        passes = {"catch-up": one_pass(), "nothing changed": one_pass()}
        after = finish_some(proc, finishing)
        print(f"     moved the clock: {after['succeeded']:,} pods succeeded", flush=True)
        kube.reset_client()
        warm_up()
        passes[f"{changed:.0%} changed"] = one_pass(
            workdir.parent / f"reconcile-{size}.prof" if profile else None
        )
        report.params[f"finishing_jobs_{size}"] = len(finishing)
        return passes
    finally:
        proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--quick", action="store_true", help="sizes 200 and 2,000")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the changed pass under cProfile: top functions printed, stats in the temp dir",
    )
    args = parser.parse_args()
    sizes = [200, 2_000] if args.quick else sorted(args.sizes)
    django_setup(
        "gpu_portal_bench_reconcile",
        redis_db=6,
        LOST_GRACE_SECONDS="3600",
        STALE_QUEUE_SECONDS="3600",
    )
    from django.conf import settings

    report = start(
        "reconcile",
        "One reconcile pass against the sandbox's large profile",
        sizes=sizes,
        changed=args.changed,
        profile="large (500 GPU nodes × 8 GPUs, 40 CPU nodes)",
        beat_interval_s=settings.RECONCILE_INTERVAL_SECONDS,
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    results: dict[int, dict[str, PassFigures]] = {}
    try:
        for size in sizes:
            results[size] = run_size(report, size, args.changed, workdir, args.profile)
            for name, figures in results[size].items():
                waits = ", ".join(
                    f"{method} {int(calls)}× {seconds:.2f} s"
                    for method, (calls, seconds) in sorted(figures.api_by_method.items())
                )
                print(
                    f"     {name}: {figures.wall_s:.2f} s (garbage collector "
                    f"{figures.gc_s:.2f} s); API waits: {waits}",
                    flush=True,
                )
                case = f"{size:,} jobs, {name}"
                smallest = f"{sizes[0]:,} jobs, {name}"
                report.row(
                    case,
                    baseline=smallest if size != sizes[0] else None,
                    ratio_of="wall_s",
                    wall_s=round(figures.wall_s, 3),
                    portal_s=round(figures.wall_s - figures.api_s, 3),
                    api_wait_s=round(figures.api_s, 3),
                    gc_s=round(figures.gc_s, 3),
                    queries=figures.queries,
                    api_calls=figures.api_calls,
                    rows_written=figures.rows_written,
                    jobs_updated=figures.jobs_updated,
                    events_added=figures.events_added,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    small, large = sizes[0], sizes[-1]
    changed_pass = f"{args.changed:.0%} changed"
    a, b = results[small][changed_pass], results[large][changed_pass]
    report.growth(f"pass wall time, {changed_pass}", small, large, a.wall_s, b.wall_s)
    report.growth(
        f"portal time (wall minus API waits), {changed_pass}",
        small,
        large,
        a.wall_s - a.api_s,
        b.wall_s - b.api_s,
    )
    report.growth(f"SQL statements, {changed_pass}", small, large, a.queries, b.queries)
    report.growth(f"API calls, {changed_pass}", small, large, a.api_calls, b.api_calls)
    report.growth(f"rows written, {changed_pass}", small, large, a.rows_written, b.rows_written)
    steady_small, steady_large = (
        results[small]["nothing changed"],
        results[large]["nothing changed"],
    )
    report.goal(
        "API requests do not grow with jobs beyond list pages of 500",
        met=b.api_calls <= a.api_calls + 3 * (large - small) // 500 * 6,
        value=f"{a.api_calls} → {b.api_calls} requests for {small:,} → {large:,} jobs",
    )
    report.goal(
        "rows written equal jobs changed (plus their timeline rows)",
        met=b.jobs_updated > 0 and steady_large.rows_written == 0 == steady_small.rows_written,
        value=f"{b.jobs_updated} jobs changed, {b.rows_written} rows written "
        f"({b.events_added} new timeline events); "
        f"nothing changed → {steady_large.rows_written} rows",
    )
    interval = settings.RECONCILE_INTERVAL_SECONDS
    report.goal(
        f"a {large:,}-job pass well under the beat interval ({interval:g} s)",
        met=b.wall_s < interval / 2,
        value=f"{b.wall_s:.2f} s",
    )
    report.finish()


if __name__ == "__main__":
    main()
