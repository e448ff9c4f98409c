"""manifests: job specs per second through generate + policy + schema validation.

Run: .venv/bin/python bench/bench_manifests.py [--batch N] [--repeat N] [--quick]
     (or make bench NAME=manifests)

For each of the six golden spec shapes (tests/jobs/golden/: single-GPU training, A100
8-GPU training, distributed training, MIG inference, time-sliced inference, CPU-only
job) a batch of specs differing in name and job id goes through the path a submit takes
(``jobs.services._manifests_for``): ``build_manifests`` → ``check_manifests`` (policy)
→ ``validate_manifests`` (strict OpenAPI schema). The baseline, measured interleaved
in the same run, is generation alone; the ratio full/generate is what policy and
validation add. Growth: 100 vs 1,000 specs per batch, and 5 vs 50 environment variables
per spec. The first validation in a process (reading and compiling the schemas) is
reported on its own: it is paid once, not per spec.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Report, Stats, interleaved, start
from jobs.manifests import ManifestContext, build_manifests, validate_manifests
from jobs.manifests.security import check_manifests
from jobs.spec import JobSpec
from tests.jobs.test_manifests import GOLDEN_CASES

KUBERNETES_VERSION = "1.33"
ALLOWED_REGISTRIES = ("nvcr.io", "registry.example.com", "docker.io")
GROWTH_SHAPE = "distributed_training"

Case = tuple[JobSpec, ManifestContext]


def variants(
    spec: JobSpec, ctx: ManifestContext, count: int, env_vars: int | None = None
) -> list[Case]:
    """``count`` specs of one shape, each its own job; ``env_vars`` replaces the env."""
    env = spec.env if env_vars is None else {f"SETTING_{i}": f"value-{i}" for i in range(env_vars)}
    return [
        (
            dataclasses.replace(spec, name=f"{spec.name}-{i}", env=env),
            dataclasses.replace(ctx, job_id=ctx.job_id * 10_000 + i),
        )
        for i in range(count)
    ]


def generate(cases: list[Case]) -> None:
    for spec, ctx in cases:
        build_manifests(spec, ctx)


def full_pipeline(cases: list[Case]) -> None:
    """What a submit or preview does before anything is stored (minus the database)."""
    for spec, ctx in cases:
        manifests = build_manifests(spec, ctx)
        violations = check_manifests(
            manifests, namespace=ctx.namespace, allowed_registries=ALLOWED_REGISTRIES
        )
        errors = validate_manifests(manifests, KUBERNETES_VERSION)
        if violations or errors:
            raise SystemExit(f"{spec.name}: {violations or errors}")


def per_spec_ms(stats: Stats, batch: int) -> float:
    return stats.median / batch


def specs_per_s(stats: Stats, batch: int) -> float:
    return round(batch / stats.median * 1000, 1)


def first_validation(report: Report) -> None:
    """Validation's one-off cost: schemas read and compiled on first use per process."""
    spec, ctx = GOLDEN_CASES[GROWTH_SHAPE]
    manifests = build_manifests(spec, ctx)
    started = time.perf_counter()
    validate_manifests(manifests, KUBERNETES_VERSION)
    first = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    validate_manifests(manifests, KUBERNETES_VERSION)
    second = (time.perf_counter() - started) * 1000
    report.row("first validation in a process (schema load)", Stats((first,)))
    report.row(
        "second validation, same manifests",
        Stats((second,)),
        baseline="first validation in a process (schema load)",
    )


def shapes(report: Report, batch: int, repeat: int) -> None:
    for shape, (spec, ctx) in GOLDEN_CASES.items():
        cases = variants(spec, ctx, batch)
        objects = len(build_manifests(spec, ctx))
        fns: dict[str, Callable[[], object]] = {
            "generate": functools.partial(generate, cases),
            "full": functools.partial(full_pipeline, cases),
        }
        stats = interleaved(fns, repeat)
        base = f"{shape}: generate"
        report.row(
            base,
            stats["generate"],
            specs_per_s=specs_per_s(stats["generate"], batch),
            batch=batch,
            objects_per_spec=objects,
        )
        report.row(
            f"{shape}: generate + policy + validate",
            stats["full"],
            baseline=base,
            specs_per_s=specs_per_s(stats["full"], batch),
            batch=batch,
        )


def growth(report: Report, batch: int, repeat: int) -> None:
    spec, ctx = GOLDEN_CASES[GROWTH_SHAPE]
    small, large = batch, batch * 10
    fns: dict[str, Callable[[], object]] = {
        "small": lambda: full_pipeline(variants(spec, ctx, small)),
        "large": lambda: full_pipeline(variants(spec, ctx, large)),
    }
    stats = interleaved(fns, max(3, repeat // 3))
    small_case = f"{GROWTH_SHAPE}: {small:,} specs, full pipeline"
    report.row(small_case, stats["small"], specs_per_s=specs_per_s(stats["small"], small))
    report.row(
        f"{GROWTH_SHAPE}: {large:,} specs, full pipeline",
        stats["large"],
        baseline=small_case,
        specs_per_s=specs_per_s(stats["large"], large),
    )
    report.growth(
        f"{GROWTH_SHAPE} batch time, {small:,} → {large:,} specs",
        small,
        large,
        stats["small"].median,
        stats["large"].median,
    )

    few, many = 5, 50
    fns = {
        "few": lambda: full_pipeline(variants(spec, ctx, batch, env_vars=few)),
        "many": lambda: full_pipeline(variants(spec, ctx, batch, env_vars=many)),
    }
    stats = interleaved(fns, repeat)
    few_case = f"{GROWTH_SHAPE}: {few} env vars, full pipeline"
    report.row(few_case, stats["few"], specs_per_s=specs_per_s(stats["few"], batch), batch=batch)
    report.row(
        f"{GROWTH_SHAPE}: {many} env vars, full pipeline",
        stats["many"],
        baseline=few_case,
        specs_per_s=specs_per_s(stats["many"], batch),
        batch=batch,
    )
    report.growth(
        f"{GROWTH_SHAPE} per-spec cost, {few} → {many} env vars",
        few,
        many,
        per_spec_ms(stats["few"], batch),
        per_spec_ms(stats["many"], batch),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100, help="specs per timed batch")
    parser.add_argument("--repeat", type=int, default=9, help="batches per case")
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    args = parser.parse_args()
    batch = 20 if args.quick else args.batch
    repeat = 3 if args.quick else args.repeat
    report = start(
        "manifests",
        "Job specs through generate + policy + schema validation, per spec shape",
        batch=batch,
        repeat=repeat,
        kubernetes_version=KUBERNETES_VERSION,
    )
    first_validation(report)
    shapes(report, batch, repeat)
    growth(report, batch, repeat)
    report.note(
        "policy costs microseconds; the rest of full − generate is strict OpenAPI schema "
        "validation: jsonschema_rs checks every manifest, and jsonschema runs only to name "
        "the errors of one that fails (validators are compiled once per process, see the "
        "first/second validation rows)"
    )
    report.finish()


if __name__ == "__main__":
    main()
