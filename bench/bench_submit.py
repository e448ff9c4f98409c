"""Submitting jobs through the production server, against the framework floor.

    .venv/bin/python -m bench submit                 # or: make bench NAME=submit
    .venv/bin/python bench/bench_submit.py --quick   # shorter slices, a first look

What it measures: ``POST /api/v1/jobs/`` (validation, catalog and quota checks, manifests
built, policy-checked and schema-validated, the job row, its event and audit rows, the
admission task enqueued to Redis on commit) through gunicorn with production settings,
PostgreSQL and Redis, with 1, 8 and 32 concurrent clients: requests/s, p50 and p99 latency.
In the same run and server, in alternating time slices (``--seconds`` each, ``--rounds``
times), the floor: ``GET /api/v1/me/``, an authenticated DRF endpoint doing one indexed
query beyond the token look-up. The ratio submit/floor is on requests/s over all rounds;
its spread is each round's submit slice against the floor slice before it (median, min, max).

Growth: clients 1 → 8 → 32 (latency and throughput), and the database holding 1,000 then
10,000 jobs (submit at 8 clients).

Every client is a thread with its own user, bearer token and persistent HTTP connection.
Every submit must answer 201; the job rows and the queued admission tasks are counted
afterwards. Nothing here fails on speed.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import runpy
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import REPO_ROOT, Report, Stats, django_setup, start

DATABASE = "gpu_portal_bench_submit"
REDIS_DB = 10
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
TEAM = "bench"
CELERY_QUEUE = "celery"  # Celery's default queue: a Redis list of that name
# The throttle still runs on every write (its Redis round trips are measured); only its
# limit is raised, since a benchmark is one user writing far faster than any person.
WRITE_RATE = "1000000/minute"
SPEC: dict[str, Any] = {
    "team": TEAM,
    "name": "resnet50",
    "kind": "training",
    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
    "command": ["torchrun", "train.py"],
    "args": ["--epochs", "10"],
    "env": {"SEED": "1"},
    "gpu": {"count": 1, "product": "NVIDIA-A100-SXM4-80GB"},
}


# --- set-up (in this process, development settings) ------------------------------------


def setup_data(clients: int) -> list[str]:
    """The GPU catalog, team ``bench`` with room for every job submitted, ``clients`` members
    each with an API token. Returns the tokens' secrets."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from portal.services import api_token_create
    from teams.models import Membership, Team
    from teams.services import quota_set

    call_command("seed_demo", stdout=io.StringIO())  # the catalog (and demo teams)
    team = Team.objects.create(slug=TEAM, name="Bench", namespace=f"team-{TEAM}")
    for resource in ("nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB", "cpu", "memory"):
        quota_set(actor=None, team=team, resource=resource, limit=10_000_000)
    secrets_ = []
    for i in range(clients):
        user = User.objects.create_user(f"bench{i:02}", password=secrets.token_urlsafe(16))
        Membership.objects.create(user=user, team=team)
        secrets_.append(api_token_create(user=user, description="bench")[1])
    return secrets_


def fill_jobs(total: int) -> int:
    """Top the team up to ``total`` jobs with finished, running and queued rows like real
    ones (spec, manifests, demand from a real submission). Returns the count."""
    from django.contrib.auth.models import User

    from jobs.models import Job, JobEvent, JobState
    from jobs.services.submit import job_submit

    template = Job.objects.filter(team__slug=TEAM).first()
    if template is None:
        template = job_submit(user=User.objects.get(username="bench00"), data=SPEC)
    have = Job.objects.filter(team__slug=TEAM).count()
    states = [JobState.SUCCEEDED] * 8 + [JobState.FAILED, JobState.RUNNING]
    while have < total:
        batch = [
            Job(
                team_id=template.team_id,
                owner_id=template.owner_id,
                name=f"old-{have + i}",
                kind=template.kind,
                state=states[(have + i) % len(states)],
                reason="Completed",
                spec=template.spec,
                manifests=template.manifests,
                demand=template.demand,
                gpu_count=template.gpu_count,
                namespace=template.namespace,
                object_name=f"old-{have + i}",
            )
            for i in range(min(1_000, total - have))
        ]
        Job.objects.bulk_create(batch)
        JobEvent.objects.bulk_create(JobEvent(job=job, reason="Submitted") for job in batch)
        have += len(batch)
    # What autovacuum would have done by then (as bench_pages does): measuring while it
    # works through thousands of fresh rows times autovacuum on the same 2 cores.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE jobs_job, jobs_jobevent")
    return have


def queries_per_request(token: str) -> dict[str, int]:
    """SQL statements (BEGIN and COMMIT included) of one floor and one submit request, in
    this process: the same code the server runs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    client = APIClient(HTTP_HOST="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.get("/api/v1/me/")  # the token's first use writes its last-used time
    counts = {}
    for case, send in (
        ("floor", lambda: client.get("/api/v1/me/")),
        ("submit", lambda: client.post("/api/v1/jobs/", SPEC, format="json")),
    ):
        with CaptureQueriesContext(connection) as captured:
            response = send()
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{case} answered {response.status_code}: {response.content!r}")
        counts[case] = len(captured.captured_queries)
    return counts


def job_count() -> int:
    from jobs.models import Job

    return Job.objects.filter(team__slug=TEAM).count()


def celery_queue_length(*, purge: bool = False) -> int:
    import redis

    conn = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        length = int(cast(int, conn.llen(CELERY_QUEUE)))  # redis-py types sync and async alike
        if purge:
            conn.delete(CELERY_QUEUE)
        return length
    finally:
        conn.close()


@contextmanager
def admission_starter() -> Iterator[list[int]]:
    """Stands in for a worker that starts every queued admission run at once.

    It takes each admission message off the broker's list and clears the team's
    "run queued" mark, as ``admission_task`` does first thing, and no more: the admission
    work itself would only take CPU from the measured cores. Starting runs at once is the
    least coalescing a burst of submits can get (a busy worker lets more of them share a
    run), so the submit figures here are the dearest case. Yields ``[messages taken]``.
    """
    import redis

    from jobs.tasks import ADMISSION_QUEUED_KEY
    from teams.models import Team

    mark = ADMISSION_QUEUED_KEY.format(team_id=Team.objects.get(slug=TEAM).pk)
    taken = [0]
    stop = threading.Event()

    def run() -> None:
        conn = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
        try:
            while not stop.is_set():
                if conn.blpop([CELERY_QUEUE], timeout=0.2):
                    conn.delete(mark)
                    taken[0] += 1
        finally:
            conn.close()

    thread = threading.Thread(target=run, name="admission-starter", daemon=True)
    thread.start()
    try:
        yield taken
    finally:
        stop.set()
        thread.join(timeout=5)


# --- the server ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gunicorn_config(overrides: list[str]) -> dict[str, Any]:
    """The project's gunicorn.conf.py settings, as the server started with ``overrides``
    (``--workers N``, ``--worker-class K``, ``--threads N``) runs them."""
    config = runpy.run_path(str(REPO_ROOT / "gunicorn.conf.py"))
    settings = {key: config[key] for key in ("workers", "worker_class")}
    settings["threads"] = 1
    for flag, value in zip(overrides[::2], overrides[1::2], strict=True):
        key = flag.removeprefix("--").replace("-", "_")
        settings[key] = int(value) if value.isdigit() else value
    return settings


@contextmanager
def gunicorn(*, port: int, static_root: str, overrides: list[str]) -> Iterator[None]:
    """gunicorn as deployed (the project's gunicorn.conf.py, PORTAL_ENV=production) on
    127.0.0.1:``port`` with ``overrides`` on its command line, stopped on the way out.
    Its access log is written, as in production, to a discarded stdout."""
    env = {
        **os.environ,
        "PORTAL_ENV": "production",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "ALLOWED_HOSTS": "127.0.0.1",
        # Plain HTTP on the loopback, as docker-compose.yml serves it; behind an ingress that
        # terminates TLS this is true and the proxy sets X-Forwarded-Proto.
        "SECURE_SSL_REDIRECT": "false",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
        "REDIS_URL": REDIS_URL,
        "API_WRITE_RATE": WRITE_RATE,
        "STATIC_ROOT": static_root,
        "LOG_LEVEL": "WARNING",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("GUNICORN_CMD_ARGS", None)
    command = [
        str(Path(sys.executable).parent / "gunicorn"),
        "portal.wsgi:application",
        "--config",
        str(REPO_ROOT / "gunicorn.conf.py"),
        "--bind",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
        *overrides,
    ]
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {proc.returncode} while starting")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
                conn.close()
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not answer /healthz within 60 s")
            time.sleep(0.2)
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# --- the clients -----------------------------------------------------------------------


@dataclass
class Run:
    """One load run: every request's latency, the statuses, the wall time."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    rounds_req_per_s: list[float] = field(default_factory=list)

    @property
    def ok(self) -> int:
        return sum(n for code, n in self.statuses.items() if code in (200, 201))

    def add(self, other: Run) -> None:
        self.latencies_ms += other.latencies_ms
        self.statuses.update(other.statuses)
        self.errors += other.errors
        self.wall_s += other.wall_s


def load(*, port: int, tokens: list[str], case: str, seconds: float) -> Run:
    """``len(tokens)`` clients at once, each sending requests one after another on its own
    keep-alive connection for ``seconds``; wall time from the common start to the last
    answer."""
    run = Run()
    lock = threading.Lock()
    ready = threading.Barrier(len(tokens) + 1)
    body = json.dumps(SPEC).encode()

    def client(token: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Bearer {token}", "Host": "127.0.0.1"}
        if case == "submit":
            method, path, payload = "POST", "/api/v1/jobs/", body
            headers["Content-Type"] = "application/json"
        else:
            method, path, payload = "GET", "/api/v1/me/", None
        conn.connect()
        latencies, statuses, errors = [], Counter[int](), []
        ready.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                content = response.read()
            except (OSError, http.client.HTTPException) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()  # http.client reconnects on the next request
                continue
            latencies.append((time.perf_counter() - started) * 1000)
            statuses[response.status] += 1
            if response.status not in (200, 201) and len(errors) < 5:
                errors.append(f"{response.status}: {content[:200]!r}")
        conn.close()
        with lock:
            run.latencies_ms.extend(latencies)
            run.statuses.update(statuses)
            run.errors.extend(errors)

    threads = [threading.Thread(target=client, args=(t,), daemon=True) for t in tokens]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    run.wall_s = time.perf_counter() - started
    return run


def figures(run: Run) -> dict[str, Any]:
    return {
        "req_per_s": round(len(run.latencies_ms) / run.wall_s, 1) if run.wall_s else 0.0,
        "ok": run.ok,
        "errors": len(run.latencies_ms) + len(run.errors) - run.ok,
        "wall_s": round(run.wall_s, 2),
    }


def measure(
    *, port: int, tokens: list[str], clients: int, seconds: float, rounds: int
) -> dict[str, Run]:
    """Floor and submit in alternating time slices of ``seconds`` (floor, submit, floor, …)
    so a noisy moment on the shared host hits both alike."""
    runs = {"floor": Run(), "submit": Run()}
    for _ in range(rounds):
        for case, total in runs.items():
            run = load(port=port, tokens=tokens[:clients], case=case, seconds=seconds)
            total.add(run)
            total.rounds_req_per_s.append(figures(run)["req_per_s"])
    return runs


def round_ratios(runs: dict[str, Run]) -> dict[str, float]:
    """The spread of submit/floor over the rounds: each round's submit slice against the
    floor slice just before it (the pair closest in time on a noisy host)."""
    pairs = zip(runs["floor"].rounds_req_per_s, runs["submit"].rounds_req_per_s, strict=True)
    ratios = sorted(submit / floor for floor, submit in pairs if floor)
    if not ratios:
        return {}
    return {
        "round_ratio_median": round(statistics.median(ratios), 3),
        "round_ratio_min": round(ratios[0], 3),
        "round_ratio_max": round(ratios[-1], 3),
    }


def report_rows(
    report: Report, runs: dict[str, Run], label: str, queries: dict[str, int]
) -> tuple[Stats, Stats]:
    stats = {case: Stats(tuple(run.latencies_ms)) for case, run in runs.items()}
    floor_case = f"floor GET /api/v1/me/, {label}"
    report.row(floor_case, stats["floor"], **figures(runs["floor"]), queries=queries["floor"])
    report.row(
        f"submit POST /api/v1/jobs/, {label}",
        stats["submit"],
        baseline=floor_case,
        ratio_of="req_per_s",
        **figures(runs["submit"]),
        queries=queries["submit"],
        **round_ratios(runs),
    )
    for case, run in runs.items():
        for error in sorted(set(run.errors))[:3]:
            report.note(f"{case}, {label}: {error}")
    return stats["floor"], stats["submit"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,8,32", help="concurrency levels (default 1,8,32)")
    parser.add_argument("--seconds", type=float, default=2.5, help="per case, level and round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating floor/submit rounds")
    # Left out, gunicorn.conf.py decides, as it does in production.
    parser.add_argument("--workers", type=int, help="gunicorn workers")
    parser.add_argument("--worker-class", choices=["sync", "gthread"], help="gunicorn's")
    parser.add_argument("--threads", type=int, help="threads per gthread worker")
    parser.add_argument("--quick", action="store_true", help="1 s slices, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 1.0, 2
    levels = [int(n) for n in args.clients.split(",")]
    small, large = 1_000, 10_000
    overrides = [
        item
        for flag, value in (
            ("--workers", args.workers),
            ("--worker-class", args.worker_class),
            ("--threads", args.threads),
        )
        if value is not None
        for item in (flag, str(value))
    ]
    server = gunicorn_config(overrides)
    slots = server["workers"] * server["threads"]

    django_setup(DATABASE, redis_db=REDIS_DB, API_WRITE_RATE=WRITE_RATE)
    report = start(
        "submit",
        "POST /api/v1/jobs/ through gunicorn (production settings) vs an authenticated floor",
        clients=levels,
        seconds_per_case_level_round=args.seconds,
        rounds=args.rounds,
        gunicorn=f"{server['workers']} {server['worker_class']} workers × {server['threads']}",
        jobs_in_database=[small, large],
    )
    tokens = setup_data(max(levels))
    queries = queries_per_request(tokens[0])
    fill_jobs(small)
    celery_queue_length(purge=True)
    report.note(
        f"gunicorn as deployed: gunicorn.conf.py ({server['workers']} {server['worker_class']} "
        f"workers{' × ' + str(server['threads']) + ' threads' if server['threads'] > 1 else ''}"
        f"{', overridden: ' + ' '.join(overrides) if overrides else ''}), access log written "
        "(to a discarded stdout), PORTAL_ENV=production, DEBUG off. Sync workers close each "
        "connection, so each request is a new connection, to the floor as to submit."
    )
    report.note(
        "Plain HTTP on 127.0.0.1 with SECURE_SSL_REDIRECT=false (as docker-compose.yml); "
        f"API_WRITE_RATE={WRITE_RATE}: the per-user throttle still runs (Redis), its limit "
        "is raised."
    )
    report.note(
        "No Celery worker runs: admission_starter takes each queued admission message at "
        "once and clears the team's run-queued mark, as a worker starting the run would, "
        "without the run's work (it would take CPU from the 2 measured cores); runs that "
        "start at once let the fewest submits share one, so this is the dearest case."
    )

    submitted = 0
    by_level: dict[int, tuple[Stats, Stats, dict[str, Run]]] = {}
    with tempfile.TemporaryDirectory() as static_root:
        port = free_port()
        with (
            gunicorn(port=port, static_root=static_root, overrides=overrides),
            admission_starter() as taken,
        ):
            # Warm every worker (imports, connections, schema validators) before measuring.
            warm = tokens[:slots]
            load(port=port, tokens=warm, case="floor", seconds=1.0)
            submitted += load(port=port, tokens=warm, case="submit", seconds=1.5).ok
            before = job_count()
            for clients in levels:
                runs = measure(
                    port=port,
                    tokens=tokens,
                    clients=clients,
                    seconds=args.seconds,
                    rounds=args.rounds,
                )
                floor, submit = report_rows(
                    report, runs, f"{clients} clients, {small:,} jobs", queries
                )
                by_level[clients] = (floor, submit, runs)
                submitted += runs["submit"].ok
            stored = job_count() - before
            # The 10× database: the same submit at 8 clients (or the middle level).
            mid = 8 if 8 in levels else levels[len(levels) // 2]
            fill_jobs(large)
            runs = measure(
                port=port, tokens=tokens, clients=mid, seconds=args.seconds, rounds=args.rounds
            )
            _, submit_large = report_rows(report, runs, f"{mid} clients, {large:,} jobs", queries)
            submitted += runs["submit"].ok
        enqueued = taken[0] + celery_queue_length(purge=True)

    ok_measured = sum(r[2]["submit"].ok for r in by_level.values())
    report.note(
        f"{ok_measured} submits answered 201 at {small:,} jobs and {stored} job rows were "
        f"stored meanwhile; {enqueued} admission runs were queued in all "
        f"({submitted} submits, warm-up included; concurrent submits share a queued run)."
    )
    first, last = levels[0], levels[-1]
    for a, b in ((first, mid), (first, last)):
        if a == b:
            continue
        report.growth(
            f"submit p50 latency, clients {a} → {b}",
            a,
            b,
            by_level[a][1].median,
            by_level[b][1].median,
        )
        report.growth(
            f"submit req/s, clients {a} → {b}",
            a,
            b,
            figures(by_level[a][2]["submit"])["req_per_s"],
            figures(by_level[b][2]["submit"])["req_per_s"],
        )
    report.growth(
        f"submit p50 latency at {mid} clients, jobs in database",
        small,
        large,
        by_level[mid][1].median,
        submit_large.median,
    )

    ratios = {
        clients: report.find(f"submit POST /api/v1/jobs/, {clients} clients, {small:,} jobs").ratio
        for clients in levels
    }
    worst = min(r for r in ratios.values() if r is not None)
    # Documented Django and DRF only (issue of 2026-11-24): 0.4× the floor, not the last
    # per cent; the same reads and writes through private shortcuts reached 0.5-0.6×.
    report.goal(
        "submit ≥ 0.4 of the floor's requests/s",
        met=worst >= 0.4,
        value=", ".join(f"{c} clients {r:.2f}×" for c, r in ratios.items()),
    )
    if mid in by_level:
        p99 = by_level[mid][1].p99
        report.goal(
            f"submit p99 < 100 ms at {mid} clients", met=p99 < 100, value=f"p99 {p99:.1f} ms"
        )
    all_ok = all(
        run.ok == len(run.latencies_ms) and not run.errors
        for _, _, runs_ in by_level.values()
        for run in runs_.values()
    )
    report.goal(
        "every request answered 200/201 and every 201 stored a job",
        met=all_ok and stored == ok_measured,
        value=f"{ok_measured} × 201, {stored} rows",
    )
    report.finish()


if __name__ == "__main__":
    main()
