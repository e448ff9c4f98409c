"""The GPU dashboards against the Prometheus queries they make, on 24 h of DCGM history.

    .venv/bin/python -m bench dashboard                 # 128 and 1,024 GPUs, 24 h
    .venv/bin/python bench/bench_dashboard.py --quick   # 6 h of history, 3 samples

For each cluster size (the ``dashboard`` profile, 128 nodes × 8 GPUs, and an eighth of it):

1. ``python -m sandbox history`` writes the DCGM series the exporter would have exposed
   for a simulated workload of six teams (OpenMetrics), and ``promtool tsdb
   create-blocks-from openmetrics`` backfills them into a fresh TSDB that a real
   Prometheus then serves (no scraping: the history is the data).
2. A sandbox cluster with the same profile answers the portal's node listing, and the
   database holds the teams, quotas and jobs the history refers to.
3. During one warm-up call of each endpoint, the Prometheus adapter records the exact
   PromQL and parameters it sends; the timed baseline replays them as plain HTTP GETs
   (one after another, reading the body, no JSON parsing), interleaved with the endpoint
   itself through Django's test client as a platform admin.

4. ``promtool tsdb create-blocks-from rules`` then backfills the shipped recording rules
   from that history (what an operator does when turning the rules on), Prometheus is
   restarted with those blocks too, and the cluster and team lines are measured again with
   ``PROMETHEUS_RECORDING_RULES`` on: against their own (recorded-series) queries, and
   against the same endpoints reading the raw series.

Reported: portal ms / Prometheus ms per endpoint (goal ≤ 1.5 at 1,024 GPUs), recorded /
raw per endpoint the rules serve, and how both grow from 128 to 1,024 GPUs.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import REPO_ROOT, Report, django_setup, interleaved, start

DATABASE = "gpu_portal_bench_dashboard"
REDIS_DB = 8
SMALL_DIVISOR = 8  # the small cluster: every pool's node count divided by this
# History runs on past "now" by this much: instant queries look back 5 minutes, and the
# benchmark measures for a few minutes after writing the history.
TAIL_SECONDS = 1200
RANGE = "24h"
# The endpoints whose lines the recording rules keep (the job charts read raw series).
RECORDED = ("cluster heatmap (page panels)", "cluster utilisation (API)", "team usage (API)")
FAST_FACTOR = 6  # samples for an endpoint answered within 1 s: --repeat × this


def scaled_profile(divisor: int) -> dict[str, Any]:
    from sandbox.profiles import load_profile

    profile = copy.deepcopy(load_profile("dashboard"))
    if divisor > 1:
        profile["name"] = f"dashboard-1-{divisor}"
        for pool in profile["pools"]:
            pool["count"] = max(1, int(pool["count"]) // divisor)
    return profile


def gpu_count(profile: dict[str, Any]) -> int:
    return sum(
        int(p["count"]) * int((p.get("gpu") or {}).get("count", 0)) for p in profile["pools"]
    )


# --- 1. History and Prometheus ---------------------------------------------------------


def backfill(
    workdir: Path,
    profile_path: Path,
    hours: float,
    step: int,
    end: float,
    families: tuple[str, ...] = (),
) -> dict:
    """``hours`` of history (of ``families`` only, if given) as blocks a Prometheus serves."""
    history = workdir / "history.om"
    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            "history",
            "--profile",
            str(profile_path),
            "--hours",
            f"{hours:g}",
            "--step",
            str(step),
            "--end",
            f"{end:.0f}",
            "--out",
            str(history),
            *(["--families", ",".join(families)] if families else []),
        ],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    written = time.perf_counter() - started
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    blocks = workdir / "blocks"
    started = time.perf_counter()
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            # One block for the whole window instead of one pass over the file per 2 h.
            f"--max-block-duration={max(2, int(hours) + 2)}h",
            "--quiet",
            str(history),
            str(blocks),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    backfilled = time.perf_counter() - started
    size = history.stat().st_size
    history.unlink()  # hundreds of MB; the blocks hold it now
    return {
        "history_bytes": size,
        "samples": int(fields["samples"]),
        "series": int(fields["series"]),
        "jobs": int(fields["jobs"]),
        "write_s": round(written, 1),
        "backfill_s": round(backfilled, 1),
        "blocks": blocks,
        "tsdb_bytes": sum(f.stat().st_size for f in blocks.rglob("*") if f.is_file()),
    }


def backfill_rules(prom: Prometheus, workdir: Path, start: float, end: float, step: int) -> dict:
    """Blocks of the recording rules ``prom`` loads over the history, evaluated by promtool
    through its API every half history step (so the 5-minute lookback never finds a gap)."""
    blocks = workdir / "rule-blocks"
    started = time.perf_counter()
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "rules",
            f"--url={prom.url}",
            f"--start={start:.0f}",
            f"--end={end:.0f}",
            f"--eval-interval={max(1, step // 2)}s",
            f"--output-dir={blocks}",
            "--quiet",
            str(prom.rules),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return {"blocks": blocks, "backfill_s": round(time.perf_counter() - started, 1)}


class Prometheus:
    """A Prometheus serving backfilled blocks, with the shipped rules and no targets."""

    def __init__(self, workdir: Path, blocks: Path) -> None:
        from monitoring.prometheus_config import render_config, render_rules
        from tests.monitoring.prometheus_process import free_port

        self.workdir = workdir
        self.data = workdir / "data"
        shutil.copytree(blocks, self.data)
        self.rules = workdir / "gpu-alerts.yml"
        self.rules.write_text(render_rules())
        self.config = workdir / "prometheus.yml"
        self.config.write_text(
            render_config(dcgm_targets=[], portal_targets=[], rule_files=[str(self.rules)])
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._start()

    def _start(self) -> None:
        from tests.monitoring.prometheus_process import prometheus_binary
        from tests.processes import http_ok, spawn, wait_ready

        log = self.workdir / "prometheus.log"
        self.process = spawn(
            [
                prometheus_binary(),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d",
                "--log.level=warn",
            ],
            log,
        )
        wait_ready(
            self.process,
            lambda: http_ok(f"{self.url}/-/ready"),
            what="prometheus",
            log_file=log,
            timeout=120,
        )

    def add_blocks(self, blocks: Path) -> None:
        """Stop, add more blocks (other series over the same hours), start again."""
        self.stop()
        for block in blocks.iterdir():
            shutil.copytree(block, self.data / block.name)
        self._start()

    def stop(self) -> None:
        from tests.processes import terminate

        terminate(self.process, 10.0)


# --- 2. The portal's database ----------------------------------------------------------


def seed_database(jobs: list[Any], now: float) -> tuple[Any, dict[str, Any]]:
    """Teams, quotas, an admin and one Job row per simulated job (state as of ``now``)."""
    from django.contrib.auth.models import User

    from jobs.models import Job, JobState
    from teams.models import GpuQuota, Team

    Job.objects.all().delete()
    GpuQuota.objects.all().delete()
    Team.objects.all().delete()
    admin, _ = User.objects.get_or_create(
        username="bench-admin", defaults={"is_superuser": True, "is_staff": True}
    )
    owners = {}
    teams = {}
    for slug in sorted({j.team for j in jobs}):
        teams[slug] = Team.objects.create(name=slug.title(), slug=slug, namespace=f"team-{slug}")
        owners[slug], _ = User.objects.get_or_create(username=f"{slug}-lead")
        GpuQuota.objects.create(team=teams[slug], resource="nvidia.com/gpu", limit=256)
    rows = []
    ids: dict[str, Any] = {}
    for job in jobs:
        if job.start > now:
            continue
        running = job.end is None or job.end > now
        rows.append(
            Job(
                team=teams[job.team],
                owner=owners[job.team],
                name=job.name,
                kind=job.kind,
                state=JobState.RUNNING if running else JobState.SUCCEEDED,
                spec={
                    "name": job.name,
                    "kind": job.kind,
                    "gpu": {
                        "count": len(job.devices),
                        "product": job.product,
                        "sharing": "mig" if "mig-" in job.resource else "exclusive",
                    },
                },
                demand={job.resource: len(job.devices)},
                gpu_count=len(job.devices),
                placement={
                    "nodes": [job.node],
                    "gpu_product": job.product,
                    "pods": [{"name": job.pod, "node": job.node, "phase": "Running"}],
                },
                namespace=job.namespace,
                object_name=job.object_name,
                started_at=datetime.fromtimestamp(job.start, UTC),
                finished_at=None if running else datetime.fromtimestamp(job.end, UTC),
            )
        )
    created = Job.objects.bulk_create(rows, batch_size=1000)
    now_dt = datetime.fromtimestamp(now, UTC)
    # The job whose charts are timed: the widest one that ran longest in the window.
    widest = max(
        (j for j in created if j.finished_at is None and j.started_at is not None),
        key=lambda j: (j.gpu_count, -(j.started_at or now_dt).timestamp()),
    )
    ids["job"] = widest.pk
    team_load: dict[str, int] = {}
    for j in created:
        team_load[j.team.slug] = team_load.get(j.team.slug, 0) + j.gpu_count
    ids["team"] = max(team_load, key=lambda s: team_load[s])
    return admin, ids


# --- 3. Capturing and replaying the PromQL ----------------------------------------------


@contextmanager
def recording(calls: list[tuple[str, dict[str, str]]]) -> Iterator[None]:
    """Record every request the adapter sends, as (path, params) for a plain HTTP replay."""
    from monitoring import prometheus

    originals = (prometheus.query, prometheus.query_range, prometheus.alerts)

    def query(promql: str, *, at: datetime | None = None, timeout: float | None = None) -> Any:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        calls.append(("/api/v1/query", params))
        return originals[0](promql, at=at, timeout=timeout)

    def query_range(promql: str, *, start: datetime, end: datetime, step: int) -> Any:
        params = {
            "query": promql,
            "start": str(round(start.timestamp())),
            "end": str(round(end.timestamp())),
            "step": f"{step}s",
        }
        calls.append(("/api/v1/query_range", params))
        return originals[1](promql, start=start, end=end, step=step)

    def alerts() -> Any:
        calls.append(("/api/v1/alerts", {}))
        return originals[2]()

    prometheus.query, prometheus.query_range, prometheus.alerts = query, query_range, alerts
    try:
        yield
    finally:
        prometheus.query, prometheus.query_range, prometheus.alerts = originals


def replayer(url: str, calls: list[tuple[str, dict[str, str]]]) -> Callable[[], int]:
    session = requests.Session()

    def replay() -> int:
        size = 0
        for path, params in calls:
            response = session.get(url + path, params=params, timeout=60)
            response.raise_for_status()
            size += len(response.content)
        return size

    return replay


# --- The run -----------------------------------------------------------------------------


def measure_size(
    report: Report,
    divisor: int,
    *,
    hours: float,
    step: int,
    repeat: int,
    tmp: Path,
) -> dict[str, dict[str, float]]:
    from django.conf import settings
    from django.test import Client
    from django.urls import reverse

    from cluster import kube
    from monitoring import prometheus
    from sandbox.history import simulate_workload
    from tests.sandbox_process import start_sandbox

    profile = scaled_profile(divisor)
    gpus = gpu_count(profile)
    workdir = tmp / f"gpus-{gpus}"
    workdir.mkdir()
    profile_path = workdir / "profile.yaml"
    profile_path.write_text(yaml.safe_dump(profile, sort_keys=False))
    end = float(int(time.time()) + TAIL_SECONDS)
    data = backfill(workdir, profile_path, hours, step, end)
    report.note(
        f"{gpus} GPUs: {hours:g} h of history at a {step} s step, {data['jobs']} jobs: "
        f"{data['samples']:,} samples ({data['series']:,} series at a time), OpenMetrics file "
        f"{data['history_bytes'] / 1e6:,.0f} MB written in {data['write_s']} s, backfilled by "
        f"promtool in {data['backfill_s']} s into {data['tsdb_bytes'] / 1e6:,.1f} MB of blocks"
    )
    prom = Prometheus(workdir, data["blocks"])
    sandbox = start_sandbox(workdir / "sandbox", profile=str(profile_path), speed=1.0)
    results: dict[str, dict[str, float]] = {}
    try:
        settings.PROMETHEUS_URL = prom.url
        settings.PROMETHEUS_TIMEOUT = 60.0
        settings.KUBECONFIG = str(sandbox.kubeconfig)
        prometheus.reset_client()
        kube.reset_client()
        # Recompute the workload the history was written from (same profile, seed, window).
        step_end = float(int(end // step) * step)
        window_start = step_end - int(hours * 3600 // step) * step
        jobs = simulate_workload(profile, seed=0, start=window_start, end=step_end)
        admin, ids = seed_database(jobs, time.time())
        client = Client(HTTP_HOST="localhost")
        client.force_login(admin)
        hx: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}
        endpoints: dict[str, Callable[[], Any]] = {
            "cluster heatmap (page panels)": lambda: client.get(
                reverse("monitoring:cluster"),
                {"range": RANGE},
                **hx,
                HTTP_HX_TARGET="cluster-panels",
            ),
            "cluster utilisation (API)": lambda: client.get(
                reverse("api-monitoring-cluster"), {"range": RANGE}
            ),
            "team usage (API)": lambda: client.get(
                reverse("api-monitoring-team-usage", args=[ids["team"]]), {"range": RANGE}
            ),
            "job GPUs (charts partial)": lambda: client.get(
                reverse("monitoring:job-gpus", args=[ids["job"]]), **hx
            ),
        }

        def measure(case: str, call: Callable[[], Any]) -> dict[str, float]:
            calls: list[tuple[str, dict[str, str]]] = []
            started = time.perf_counter()
            with recording(calls):
                response = call()
            # Endpoints answered within a second get more samples: their medians are the
            # noisiest, and more of them cost little.
            samples = repeat if time.perf_counter() - started > 1.0 else repeat * FAST_FACTOR
            assert response.status_code == 200, (case, response.status_code, response.content[:500])
            body = response.content
            assert b"metrics unavailable" not in body, (case, body[:500])
            stats = interleaved({"portal": call, "prometheus": replayer(prom.url, calls)}, samples)
            base = f"{case}, {gpus} GPUs: Prometheus"
            report.row(base, stats["prometheus"], requests=len(calls))
            report.row(
                f"{case}, {gpus} GPUs: portal",
                stats["portal"],
                baseline=base,
                response_bytes=len(body),
            )
            return {"portal": stats["portal"].median, "prometheus": stats["prometheus"].median}

        settings.PROMETHEUS_RECORDING_RULES = False
        for case, call in endpoints.items():
            results[case] = measure(case, call)

        # The recording rules, backfilled from the same history, then the lines they serve.
        rules = backfill_rules(prom, workdir, window_start, end, step)
        prom.add_blocks(rules["blocks"])
        report.note(
            f"{gpus} GPUs: the shipped recording rules backfilled by promtool from the history "
            f"in {rules['backfill_s']} s (evaluated every {max(1, step // 2)} s)"
        )
        settings.PROMETHEUS_RECORDING_RULES = True
        for case in RECORDED:
            recorded = f"{case} with recording rules"
            results[recorded] = measure(recorded, endpoints[case])
            raw, fast = results[case]["portal"], results[recorded]["portal"]
            report.note(
                f"{case}, {gpus} GPUs: {raw:,.0f} ms reading the raw series, {fast:,.0f} ms "
                f"with recording rules ({raw / fast:,.0f}× faster; measured one after the other)"
            )
    finally:
        settings.PROMETHEUS_RECORDING_RULES = False
        sandbox.stop()
        prom.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="history to backfill")
    parser.add_argument("--step", type=int, default=300, help="seconds between history samples")
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed samples per endpoint (×6 under 1 s)"
    )
    parser.add_argument("--quick", action="store_true", help="6 h of history, 3 samples")
    args = parser.parse_args()
    if args.quick:
        args.hours, args.step, args.repeat = 6.0, 300, 3
    if shutil.which("promtool") is None:
        raise SystemExit("promtool is missing: bash scripts/ensure_tools.sh prometheus")
    django_setup(
        DATABASE,
        redis_db=REDIS_DB,
        PROMETHEUS_TIMEOUT="60",
        STATIC_ROOT=str(REPO_ROOT / "var" / "static"),
    )
    report = start(
        "dashboard",
        f"GPU dashboards vs the raw Prometheus queries they make, {args.hours:g} h of DCGM "
        "history (backfilled)",
        hours=args.hours,
        step=args.step,
        repeat=args.repeat,
        range=RANGE,
    )
    sizes: dict[int, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(
        dir=REPO_ROOT / "var" if (REPO_ROOT / "var").is_dir() else None
    ) as tmp:
        for divisor in (SMALL_DIVISOR, 1):
            gpus = gpu_count(scaled_profile(divisor))
            sizes[gpus] = measure_size(
                report, divisor, hours=args.hours, step=args.step, repeat=args.repeat, tmp=Path(tmp)
            )
    small, large = sorted(sizes)
    for case in sizes[large]:
        for side in ("portal", "prometheus"):
            report.growth(
                f"{case}: {side} median ms",
                small,
                large,
                sizes[small][case][side],
                sizes[large][case][side],
            )
    for case, figures in sizes[large].items():
        ratio = figures["portal"] / figures["prometheus"]
        report.goal(
            f"{case} at {large:,} GPUs within 1.5× its Prometheus queries",
            met=ratio <= 1.5,
            value=f"{ratio:.2f}× ({figures['portal']:.0f} ms vs {figures['prometheus']:.0f} ms)",
        )
    report.note(
        "Baseline: the same PromQL and parameters the endpoint sent (recorded from the "
        "adapter during a warm-up call), replayed one after another with requests, body read "
        "but not parsed. The history ends "
        f"{TAIL_SECONDS // 60} min after the run started so instant queries (5 min lookback) "
        "keep finding samples; backfilled series have no staleness markers."
    )
    report.finish()


if __name__ == "__main__":
    main()
