"""Run the benchmarks and print one summary table.

    python -m bench                  # all of them (make bench)
    python -m bench submit pages     # some (make bench NAME="submit pages")
    python -m bench --summary        # only print the tables of the saved results

Each ``bench/bench_<name>.py`` runs in its own process (each sets up Django, databases and
subprocesses of its own) and writes ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
ORDER = ("manifests", "schedule", "pages", "submit", "reconcile", "dashboard")


def available() -> list[str]:
    found = {p.stem.removeprefix("bench_") for p in BENCH_DIR.glob("bench_*.py")}
    return [n for n in ORDER if n in found] + sorted(found - set(ORDER))


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def headline(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(case, figures, ratio) for every row of a result."""
    lines = []
    keys = (
        "req_per_s",
        "pods_per_s",
        "specs_per_s",
        "median_ms",
        "p95_ms",
        "p99_ms",
        "queries",
        "api_calls",
        "rows_written",
        "wall_s",
    )
    for row in result["rows"]:
        metrics = row["metrics"]
        figures = ", ".join(
            f"{k.replace('_', ' ')} {_fmt(metrics[k])}" for k in keys if k in metrics
        )
        ratio = f"{row['ratio']:.2f}× {row['baseline']}" if row.get("ratio") is not None else ""
        if ratio and "round_ratio_median" in metrics:
            ratio += (
                f" (per round: median {metrics['round_ratio_median']:.2f}×, "
                f"{metrics['round_ratio_min']:.2f}–{metrics['round_ratio_max']:.2f}×)"
            )
        lines.append((row["case"], figures, ratio))
    return lines


def summary_markdown(names: list[str]) -> str:
    out: list[str] = []
    for name in names:
        result = load(name)
        if result is None:
            continue
        m = result["machine"]
        out.append(f"#### {name} — {result['title']}")
        out.append("")
        out.append(
            f"{result['date'][:10]}, {m['cpu']}, {m['cores']} cores, Python {m['python']}, "
            f"{result['duration_seconds']:.0f} s."
        )
        out.append("")
        out.append("| case | figures | ratio to baseline |")
        out.append("|---|---|---|")
        for case, figures, ratio in headline(result):
            out.append(f"| {case} | {figures} | {ratio} |")
        if result["growth"]:
            out.append("")
            out.append("Growth:")
            for g in result["growth"]:
                out.append(
                    f"- {g['what']}: input ×{g['input_factor']:g} → cost ×{g['cost_factor']:g} "
                    f"(∝ size^{g['exponent']:g})"
                )
        if result["goals"]:
            out.append("")
            out.append("Goals:")
            for goal in result["goals"]:
                out.append(
                    f"- {'met' if goal['met'] else '**missed**'}: {goal['goal']} — {goal['value']}"
                )
        for note in result.get("notes", []):
            out.append(f"- note: {note}")
        out.append("")
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks under bench/.")
    parser.add_argument(
        "names", nargs="*", help=f"which ones (default all: {', '.join(available())})"
    )
    parser.add_argument("--summary", action="store_true", help="print saved results only")
    args = parser.parse_args()
    names = args.names or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(f"no benchmark {', '.join(unknown)}; there are: {', '.join(available())}")
        return 2
    failed = []
    if not args.summary:
        for name in names:
            started = time.monotonic()
            code = subprocess.call(
                [sys.executable, str(BENCH_DIR / f"bench_{name}.py")], cwd=REPO_ROOT
            )
            print(f"-- {name}: exit {code} after {time.monotonic() - started:.0f} s\n", flush=True)
            if code:
                failed.append(name)
    print(summary_markdown(names))
    if failed:
        print(f"benchmarks that did not finish: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
