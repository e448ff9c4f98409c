"""What every benchmark shares: sampling, statistics, baselines, results on disk, the table.

A benchmark measures its subject and, in the same run, a baseline (the framework floor, raw
Prometheus, the smallest input): machines are shared and noisy, so the figure that carries
over is the ratio, not the milliseconds. Benchmarks never assert on speed; they print a table
and write ``bench/results/<name>.json``.

    report = Report("pages", "Job pages with 10,000 jobs in the database")
    stats = sample(lambda: client.get(url), repeat=50)
    report.row("job list, 10,000 jobs", stats, baseline="job list, 1,000 jobs",
               queries=12)
    report.growth("job list median", 1_000, 10_000, small_ms, large_ms)
    report.goal("queries do not grow with jobs", met=q_small == q_large, value=...)
    report.finish()
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"


@dataclass(frozen=True)
class Stats:
    """Latency samples in milliseconds, summarised."""

    samples: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile (q in 0..100): a value that was actually observed."""
        ordered = sorted(self.samples)
        rank = max(1, math.ceil(q / 100 * len(ordered)))
        return ordered[rank - 1]

    @property
    def p95(self) -> float:
        return self.percentile(95)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    @property
    def iqr(self) -> float:
        """Spread: the interquartile range (robust to the odd slow sample on a busy host)."""
        if self.n < 4:
            return max(self.samples) - min(self.samples)
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return q3 - q1

    def summary(self) -> dict[str, float]:
        return {
            "n": self.n,
            "median_ms": round(self.median, 3),
            "p95_ms": round(self.p95, 3),
            "p99_ms": round(self.p99, 3),
            "iqr_ms": round(self.iqr, 3),
            "min_ms": round(min(self.samples), 3),
            "max_ms": round(max(self.samples), 3),
        }


def sample(fn: Callable[[], object], repeat: int, warmup: int = 1) -> Stats:
    """Run ``fn`` ``warmup`` times unmeasured, then ``repeat`` times: wall time of each."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return Stats(tuple(samples))


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, Stats]:
    """Sample several functions in turn (a, b, a, b, …) so a noisy moment hits all of them.

    Use it for a subject and its baseline: their ratio then compares like with like.
    """
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1000)
    return {name: Stats(tuple(values)) for name, values in samples.items()}


def growth_exponent(
    size_small: float, size_large: float, cost_small: float, cost_large: float
) -> float:
    """k in cost ∝ size^k: 0 flat, 1 linear, 2 quadratic."""
    if cost_small <= 0 or cost_large <= 0 or size_small == size_large:
        return float("nan")
    return math.log(cost_large / cost_small) / math.log(size_large / size_small)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_1m_at_start": round(load, 2),
    }


@dataclass
class Row:
    case: str
    metrics: dict[str, Any]
    baseline: str | None = None
    ratio: float | None = None
    ratio_of: str = "median_ms"


@dataclass
class Report:
    """Rows, growth figures and goals of one benchmark; written to bench/results/NAME.json."""

    name: str
    title: str
    params: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    growths: list[dict[str, Any]] = field(default_factory=list)
    goals: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def row(
        self,
        case: str,
        stats: Stats | None = None,
        *,
        baseline: str | None = None,
        ratio_of: str = "median_ms",
        **metrics: Any,
    ) -> Row:
        """Add a row; with ``baseline`` (an earlier row's case) its ratio is computed on
        ``ratio_of`` (a metric both rows have)."""
        values: dict[str, Any] = stats.summary() if stats else {}
        values.update(metrics)
        ratio = None
        if baseline is not None:
            base = self.find(baseline)
            if base.metrics.get(ratio_of):
                ratio = round(values[ratio_of] / base.metrics[ratio_of], 3)
        entry = Row(case, values, baseline, ratio, ratio_of)
        self.rows.append(entry)
        self._print_row(entry)
        return entry

    def find(self, case: str) -> Row:
        for entry in self.rows:
            if entry.case == case:
                return entry
        raise KeyError(f"no row {case!r} in benchmark {self.name}")

    def growth(
        self, what: str, size_small: float, size_large: float, cost_small: float, cost_large: float
    ) -> None:
        """How a cost grows when the input grows (e.g. 10×): factor and exponent."""
        factor = cost_large / cost_small if cost_small else float("nan")
        exponent = growth_exponent(size_small, size_large, cost_small, cost_large)
        self.growths.append(
            {
                "what": what,
                "size_small": size_small,
                "size_large": size_large,
                "input_factor": round(size_large / size_small, 2),
                "cost_small": round(cost_small, 4),
                "cost_large": round(cost_large, 4),
                "cost_factor": round(factor, 3),
                "exponent": round(exponent, 3),
            }
        )
        print(
            f"  growth  {what}: input ×{size_large / size_small:g} → cost ×{factor:.2f} "
            f"(∝ size^{exponent:.2f})",
            flush=True,
        )

    def goal(self, goal: str, *, met: bool, value: str) -> None:
        self.goals.append({"goal": goal, "met": met, "value": value})
        print(f"  goal    {'MET ' if met else 'MISS'} {goal}: {value}", flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note    {text}", flush=True)

    def _print_row(self, entry: Row) -> None:
        shown = {k: v for k, v in entry.metrics.items() if k not in {"min_ms", "max_ms"}}
        figures = "  ".join(f"{k}={_fmt(v)}" for k, v in shown.items())
        ratio = f"  ratio={entry.ratio:.2f}× {entry.baseline!r}" if entry.ratio is not None else ""
        print(f"  {entry.case:<44} {figures}{ratio}", flush=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "duration_seconds": round(time.time() - self.started, 1),
            "machine": machine(),
            "params": self.params,
            "rows": [asdict(r) for r in self.rows],
            "growth": self.growths,
            "goals": self.goals,
            "notes": self.notes,
        }

    def finish(self) -> Path:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{self.name}.json"
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")
        print(f"  wrote {path.relative_to(REPO_ROOT)}", flush=True)
        return path


def start(name: str, title: str, **params: Any) -> Report:
    print(f"== {name}: {title}", flush=True)
    if params:
        print("  " + "  ".join(f"{k}={v}" for k, v in params.items()), flush=True)
    return Report(name, title, params)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def django_setup(database: str, redis_db: int = 11, **env: str) -> None:
    """Point Django at a benchmark database of its own (created, migrated) and set it up.

    Call before importing models. ``env`` sets further settings' environment variables.
    """
    sys.path.insert(0, str(REPO_ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{database}"
    os.environ.setdefault("REDIS_URL", f"redis://127.0.0.1:6379/{redis_db}")
    os.environ.setdefault("PORTAL_ENV", "development")
    os.environ.setdefault("DEBUG", "false")
    for key, value in env.items():
        os.environ[key] = value
    recreate_database(database)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def recreate_database(database: str) -> None:
    """Drop and create ``database`` so every run starts from the same empty state."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        "postgres://postgres@127.0.0.1:5432/postgres", autocommit=True, connect_timeout=5
    ) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
