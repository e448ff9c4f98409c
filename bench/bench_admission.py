"""What does one admission pass cost with 50 teams in one cohort and 1,000 / 10,000 queued jobs?

    .venv/bin/python bench/bench_admission.py [--sizes 1000 10000] [--repeat 5]
    .venv/bin/python bench/bench_admission.py --engine kueue [--sizes 1000 10000]
        [--kueue-workloads 15000]        # bench/bench_admission_kueue.py: Kueue mode

Fifty teams share cohort ``bench``, each with a nominal quota of 8 ``nvidia.com/gpu`` (a pool
of 400), weights 1–3. N queued training jobs of 1–8 GPUs and three priorities are spread
over the teams (job rows only: admission reads nothing else). Two passes per size:

1. *admitting*: the cohort is idle; the pass admits until the pool is full (in fair-share
   order, borrowing across teams) and writes why every other queue waits;
2. *steady*: the same pass again: nothing fits, nothing changed, nothing is written.

Each pass runs inside a transaction rolled back afterwards, so every repetition starts from
the same state. Figures: wall and CPU time of the portal's process (PostgreSQL's own CPU is
not in it), SQL statements, jobs admitted; time per admitted job. Baseline: the same pass
at the smallest size. Anchor: Kueue's scheduler performance test admits 15,000 workloads
across 30 ClusterQueues in about 351 s of wall time, most of it waiting for quota.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Stats, django_setup, start

TEAMS = 50
NOMINAL = 8


def seed(size: int) -> int:
    """The cohort, its teams and ``size`` queued jobs; returns a team id of the cohort."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from jobs.models import Job, JobState
    from teams.models import Cohort, GpuQuota, Team

    Job.objects.all().delete()
    GpuQuota.objects.all().delete()
    Team.objects.all().delete()
    Cohort.objects.all().delete()
    owner, _ = User.objects.get_or_create(username="bench")
    cohort = Cohort.objects.create(slug="bench", name="Bench")
    teams = Team.objects.bulk_create(
        Team(
            slug=f"t{i:02d}",
            name=f"Team {i}",
            namespace=f"team-t{i:02d}",
            cohort=cohort,
            weight=1 + i % 3,
        )
        for i in range(TEAMS)
    )
    GpuQuota.objects.bulk_create(
        GpuQuota(team=t, resource="nvidia.com/gpu", limit=NOMINAL) for t in teams
    )
    rng = random.Random(size)
    now = timezone.now()
    priorities = [("high", 100_000), ("normal", 10_000), ("low", 1_000)]
    jobs = []
    for i in range(size):
        gpus = rng.choice((1, 1, 2, 2, 4, 8))
        priority, value = rng.choice(priorities)
        jobs.append(
            Job(
                team=teams[rng.randrange(TEAMS)],
                owner=owner,
                name=f"j{i}",
                kind="training",
                priority=priority,
                priority_value=value,
                state=JobState.QUEUED,
                reason="Submitted",
                spec={},
                demand={"nvidia.com/gpu": gpus, "cpu": 4000 * gpus, "memory": 32 * 2**30},
                gpu_count=gpus,
                namespace="team-x",
            )
        )
    Job.objects.bulk_create(jobs, batch_size=2000)
    # Distinct submission times in id order, a second apart, as real submissions have.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET created_at = %s - interval '1 second' * "
            "((SELECT max(id) FROM jobs_job) + 1 - id)",
            [now],
        )
    return teams[0].pk


def measure(team_id: int, *, settle_first: bool, repeat: int) -> tuple[Stats, Stats, int, int]:
    """(wall, cpu, SQL statements, admitted) of one pass, ``repeat`` times, rolled back."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from jobs.services.admission import admission_run

    walls, cpus = [], []
    queries = admitted = 0
    for _ in range(repeat + 1):  # the first is a warm-up
        with transaction.atomic():
            if settle_first:
                admission_run(team_id=team_id)
            with CaptureQueriesContext(connection) as captured:
                cpu0, wall0 = time.process_time(), time.perf_counter()
                result = admission_run(team_id=team_id)
                wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            transaction.set_rollback(True)
        walls.append(wall * 1000)
        cpus.append(cpu * 1000)
        queries, admitted = len(captured), len(result.admitted)
    return Stats(tuple(walls[1:])), Stats(tuple(cpus[1:])), queries, admitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engine", choices=["portal", "kueue"], default="portal")
    parser.add_argument("--kueue-workloads", type=int, default=15_000)
    args = parser.parse_args()
    django_setup("gpu_portal_bench_admission", redis_db=7)
    sizes = sorted(args.sizes)
    if args.engine == "kueue":
        kueue_mode(sizes, args.kueue_workloads)
        return
    report = start(
        "admission",
        "One admission pass: 50 teams in one cohort, N queued jobs",
        sizes=sizes,
        teams=TEAMS,
        nominal_per_team=NOMINAL,
        repeat=args.repeat,
    )
    figures: dict[tuple[int, str], dict[str, Any]] = {}
    for size in sizes:
        team_id = seed(size)
        for name, settle_first in (("admitting", False), ("steady", True)):
            wall, cpu, queries, admitted = measure(
                team_id, settle_first=settle_first, repeat=args.repeat
            )
            case = f"{size:,} queued, {name}"
            smallest = f"{sizes[0]:,} queued, {name}"
            report.row(
                case,
                wall,
                baseline=smallest if size != sizes[0] else None,
                cpu_ms=round(cpu.median, 1),
                queries=queries,
                admitted=admitted,
                ms_per_admitted=round(wall.median / admitted, 2) if admitted else None,
            )
            figures[(size, name)] = {
                "wall": wall.median,
                "cpu": cpu.median,
                "queries": queries,
                "admitted": admitted,
            }
    small, large = sizes[0], sizes[-1]
    for name in ("admitting", "steady"):
        a, b = figures[(small, name)], figures[(large, name)]
        report.growth(f"{name} pass wall time", small, large, a["wall"], b["wall"])
        report.growth(f"{name} pass CPU time", small, large, a["cpu"], b["cpu"])
        report.growth(f"{name} pass SQL statements", small, large, a["queries"], b["queries"])
    worst = max(figures[(large, n)]["cpu"] for n in ("admitting", "steady"))
    report.goal(
        f"a pass over {large:,} queued jobs well under one second of CPU",
        met=worst < 500,
        value=f"{worst:.0f} ms of the portal's CPU at most",
    )
    report.goal(
        "SQL statements do not grow with the queue",
        met=all(
            figures[(large, n)]["queries"] <= figures[(small, n)]["queries"]
            for n in ("admitting", "steady")
        ),
        value=", ".join(
            f"{n}: {figures[(small, n)]['queries']} → {figures[(large, n)]['queries']}"
            for n in ("admitting", "steady")
        ),
    )
    report.finish()


def kueue_mode(sizes: list[int], workloads: int) -> None:
    """The portal on real Kueue, then real Kueue alone (``bench_admission_kueue``);
    written to bench/results/admission-kueue.json."""
    import tempfile

    from bench.bench_admission_kueue import kueue_alone, portal_on_kueue

    report = start(
        "admission-kueue",
        "Admission on Kueue: what the portal adds, and real Kueue alone",
        sizes=sizes,
        teams=TEAMS,
        nominal_per_team=NOMINAL,
        kueue_workloads=workloads,
    )
    with tempfile.TemporaryDirectory(prefix="bench-kueue-") as tmp:
        portal = portal_on_kueue(report, sizes, Path(tmp))
        # (--kueue-workloads 0: the portal's figures only)
        alone = kueue_alone(report, workloads, Path(tmp)) if workloads else None
    small, large = portal[sizes[0]], portal[sizes[-1]]
    # The portal's part of Kueue's admission reaching the row: from the Job unsuspended (by
    # Kueue, after it admits the Workload) to the row; Kueue's own part is reported beside.
    ours = large["portal_p50_s"] if large["portal_p50_s"] is not None else large["delay_p50_s"]
    report.goal(
        f"the portal adds < 1 s to the median submit-to-admitted at {sizes[-1]:,} queued",
        met=ours + large["submit_to_cluster_ms"] / 1000 < 1.0,
        value=f"{ours} s from the Job unsuspended to the row (p50; Kueue's admission to the "
        f"row: {large['delay_p50_s']} s), {large['submit_to_cluster_ms']} ms from submit to "
        "the Job in the cluster",
    )
    report.goal(
        "the tracker's API requests per minute do not grow with the queue",
        met=large["requests_per_min"] <= max(small["requests_per_min"] * 1.5, 30),
        value=f"{small['requests_per_min']} → {large['requests_per_min']}",
    )
    if alone is not None:
        report.note(
            f"real Kueue alone: {alone['admissions_per_s']} admissions/s wall over "
            f"{alone['workloads']:,} workloads (Kueue's scheduler test: 15,000 in ~351 s, "
            "≈ 43/s, mostly waiting for quota)"
        )
    report.finish()


if __name__ == "__main__":
    main()
