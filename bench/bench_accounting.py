"""The GPU-hour rollup and the reports page, on 30 days of DCGM history of 1,024 GPUs.

    .venv/bin/python -m bench accounting
    .venv/bin/python bench/bench_accounting.py --quick   # 3 days of an eighth of it

1. ``python -m sandbox history`` writes 30 days of the utilisation families (whole GPUs and
   MIG engine activity: what the rollup reads) for the ``dashboard`` profile's simulated
   workload, every 300 s; promtool backfills it; a real Prometheus serves it. The database
   holds one job row per simulated job (``bench_dashboard.seed_database``).
2. Every day is rolled up once (``usage_rollup_day``, at the production step of 60 s),
   recording the PromQL it sends; then, for a spread of days, the rollup is timed against
   its own queries replayed as plain HTTP GETs (the baseline: what Prometheus costs).
3. The reports page (a platform admin, one month, every team) over 1 month of rolled-up
   days, then over 12 (the month's rows copied to the 11 months before it): its time, and
   how it grows with the rows the database holds.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_dashboard import (
    Prometheus,
    backfill,
    gpu_count,
    recording,
    replayer,
    scaled_profile,
    seed_database,
)
from bench.harness import REPO_ROOT, Stats, django_setup, interleaved, sample, start

DATABASE = "gpu_portal_bench_accounting"
REDIS_DB = 7
HISTORY_STEP = 300  # seconds between backfilled samples (the rollup steps every 60 s)
FAMILIES = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
TIMED_DAYS = 5  # days whose rollup is timed against its replayed queries


def copy_months(months: int) -> int:
    """Copy the rolled-up rows of the last 30 days to the ``months - 1`` periods of 30 days
    before them (as if the cluster had run the same way all year). Returns the rows."""
    from monitoring.models import GpuUsageDay

    rows = list(GpuUsageDay.objects.all())
    copies = []
    for n in range(1, months):
        for row in rows:
            copy = GpuUsageDay(
                **{
                    f.attname: getattr(row, f.attname)
                    for f in GpuUsageDay._meta.concrete_fields
                    if f.attname != "id"
                }
            )
            copy.day = row.day - timedelta(days=30 * n)
            copies.append(copy)
    GpuUsageDay.objects.bulk_create(copies, batch_size=5000)
    return GpuUsageDay.objects.count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30, help="days of history")
    parser.add_argument("--divisor", type=int, default=1, help="cluster size: 1,024 GPUs / this")
    parser.add_argument("--repeat", type=int, default=3, help="timed samples per case")
    parser.add_argument("--quick", action="store_true", help="3 days, 128 GPUs")
    args = parser.parse_args()
    if args.quick:
        args.days, args.divisor, args.repeat = 3, 8, 3
    if shutil.which("promtool") is None:
        raise SystemExit("promtool is missing: bash scripts/ensure_tools.sh prometheus")
    django_setup(
        DATABASE,
        redis_db=REDIS_DB,
        TIME_ZONE="UTC",
        STATIC_ROOT=str(REPO_ROOT / "var" / "static"),
    )
    from django.conf import settings
    from django.test import Client
    from django.urls import reverse

    from monitoring import prometheus
    from monitoring.accounting import usage_rollup_day
    from monitoring.models import GpuUsageDay
    from sandbox.history import simulate_workload

    profile = scaled_profile(args.divisor)
    gpus = gpu_count(profile)
    report = start(
        "accounting",
        f"GPU-hour rollup and reports, {args.days} days of DCGM history of {gpus:,} GPUs",
        days=args.days,
        gpus=gpus,
        history_step=HISTORY_STEP,
        rollup_step=60,
        repeat=args.repeat,
    )
    # The history ends at the last midnight: every day in it is a whole, past day.
    today = datetime.now(UTC).date()
    end = datetime.combine(today, datetime.min.time(), tzinfo=UTC).timestamp()
    hours = args.days * 24.0
    with tempfile.TemporaryDirectory(
        dir=REPO_ROOT / "var" if (REPO_ROOT / "var").is_dir() else None
    ) as tmp:
        workdir = Path(tmp)
        profile_path = workdir / "profile.yaml"
        profile_path.write_text(yaml.safe_dump(profile, sort_keys=False))
        data = backfill(workdir, profile_path, hours, HISTORY_STEP, end, families=FAMILIES)
        report.note(
            f"History: {args.days} days at a {HISTORY_STEP} s step, {data['jobs']:,} jobs, "
            f"{data['samples']:,} samples ({data['series']:,} series at a time); OpenMetrics "
            f"{data['history_bytes'] / 1e6:,.0f} MB written in {data['write_s']} s, backfilled "
            f"in {data['backfill_s']} s into {data['tsdb_bytes'] / 1e6:,.0f} MB of blocks"
        )
        prom = Prometheus(workdir, data["blocks"])
        try:
            settings.PROMETHEUS_URL = prom.url
            settings.ACCOUNTING_STEP_SECONDS = 60
            prometheus.reset_client()
            window_start = end - args.days * 86400
            jobs = simulate_workload(profile, seed=0, start=window_start, end=end)
            admin, _ = seed_database(jobs, end)
            now = datetime.now(UTC)
            days = [today - timedelta(days=n) for n in range(args.days, 0, -1)]

            # 2. Every day once, its queries recorded.
            calls: dict[date, list[tuple[str, dict[str, str]]]] = {}
            first_run: list[float] = []
            for day in days:
                calls[day] = []
                began = time.perf_counter()
                with recording(calls[day]):
                    result = usage_rollup_day(day=day, now=now)
                first_run.append((time.perf_counter() - began) * 1000)
                assert result.measured, result.error
            rows = GpuUsageDay.objects.count()
            report.note(
                f"Rolled up {len(days)} days once: {sum(first_run) / 1000:,.1f} s in all, "
                f"{rows:,} job-day rows; per day median {Stats(tuple(first_run)).median:,.0f} "
                f"ms, slowest {max(first_run):,.0f} ms"
            )
            spread = days[:: max(1, len(days) // TIMED_DAYS)][:TIMED_DAYS]
            rollup_ms: list[float] = []
            prom_ms: list[float] = []
            for day in spread:
                stats = interleaved(
                    {
                        "rollup": partial(usage_rollup_day, day=day, now=now),
                        "prometheus": replayer(prom.url, calls[day]),
                    },
                    args.repeat,
                )
                rollup_ms += stats["rollup"].samples
                prom_ms += stats["prometheus"].samples
            base = f"one day's queries, {gpus:,} GPUs: Prometheus"
            report.row(base, Stats(tuple(prom_ms)), requests=len(calls[spread[0]]))
            report.row(
                f"rollup of one day, {gpus:,} GPUs: portal",
                Stats(tuple(rollup_ms)),
                baseline=base,
                rows_per_day=round(rows / len(days)),
            )

            # 3. The reports page over 1 month of rows, then 12.
            client = Client(HTTP_HOST="localhost")
            client.force_login(admin)
            last = days[-1]
            month = {"period": "custom", "start": str(last - timedelta(days=29)), "end": str(last)}

            def page() -> Any:
                response = client.get(reverse("monitoring:reports"), month)
                assert response.status_code == 200, response.content[:300]
                return response

            one = sample(page, repeat=args.repeat * 4)
            report.row(f"reports page, a month, {rows:,} rows (1 month)", one)
            total = copy_months(12)
            twelve = sample(page, repeat=args.repeat * 4)
            report.row(
                f"reports page, a month, {total:,} rows (12 months)",
                twelve,
                baseline=f"reports page, a month, {rows:,} rows (1 month)",
            )
            report.growth("reports page median", rows, total, one.median, twelve.median)
            report.goal(
                "the page does not grow with the months stored (≤ 1.5× at 12×)",
                met=twelve.median <= 1.5 * one.median,
                value=f"{twelve.median / one.median:.2f}×",
            )
        finally:
            prom.stop()
    report.finish()


if __name__ == "__main__":
    main()
