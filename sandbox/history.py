"""Simulated DCGM history: what the exporter would have exposed over the past hours.

``python -m sandbox history --profile dashboard --hours 24 --step 60 --out var/h.om``
writes it as OpenMetrics text, which ``promtool tsdb create-blocks-from openmetrics``
turns into TSDB blocks a Prometheus can serve (backfill). The values come from the live
exporter's own function (``dcgm.gpu_readings``), so a backfilled sample equals what
``/metrics`` would have said for the same device, time and workload.

1. The workload (``simulate_workload``) is a pure function of the profile, the seed and
   the window: every GPU node is cut into lanes (8, 4, 2 or 1 GPUs, or one MIG instance),
   and each lane alternates idle gaps and jobs of several teams (namespace ``team-<slug>``,
   objects named ``<name>-<job id>`` like the portal's, one pod per job). Some jobs hold
   their GPUs idle; jobs still running at the end of the window have no end.
2. Each family is streamed to its own temporary file (OpenMetrics wants a family's
   samples together), one series' samples in time order; the files are then joined
   under their ``# HELP``/``# TYPE`` lines and closed with ``# EOF``. Nothing is held in
   memory beyond one node's jobs.
3. Samples carry the exporter's labels plus what Prometheus adds on scrape (``job``,
   ``instance``; ``honor_labels`` keeps the exporter's ``namespace``/``pod``).

Backfilled series have no staleness markers: for up to Prometheus's lookback (5 min)
after a pod starts or ends, a device shows both its held and its unheld series.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sandbox.clock import rfc3339
from sandbox.dcgm import FAMILIES, Holder, _hash01, format_value, gpu_readings
from sandbox.profiles import Device, build_nodes, load_profile
from scheduling.resources import ANY_GPU, mig_resource

# The families the portal's queries read (monitoring/queries.py and the alert rules).
PORTAL_FAMILIES: tuple[str, ...] = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
)
TEAMS: tuple[str, ...] = ("vision", "nlp", "speech", "recsys", "robotics", "research")
SCRAPE_JOB = "dcgm-exporter"  # monitoring/prometheus_config.py's job_name
CONTAINER = "main"  # jobs/manifests/builders.py's CONTAINER_NAME
LANE_SIZES = (8, 8, 4, 4, 2, 1)  # GPUs per job on a whole-GPU node, picked per node
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet


@dataclass(frozen=True)
class SimJob:
    """One job of the simulated workload: one pod holding ``devices`` on ``node``."""

    job_id: int
    team: str  # slug
    name: str  # the job's name in its spec
    kind: str  # training | inference
    idle: bool  # holds its GPUs without using them
    node: str
    product: str
    resource: str  # nvidia.com/gpu or nvidia.com/mig-<profile>
    devices: tuple[str, ...]  # GPU or MIG UUIDs (Device.id)
    start: float
    end: float | None  # None: still running at the end of the window

    @property
    def namespace(self) -> str:
        return f"team-{self.team}"

    @property
    def object_name(self) -> str:
        return f"{self.name}-{self.job_id}"

    @property
    def pod(self) -> str:
        suffix = _suffix(self.job_id, "pod", 5)
        if self.kind == "inference":  # Deployment → ReplicaSet → pod
            return f"{self.object_name}-{_suffix(self.job_id, 'rs', 10)}-{suffix}"
        return f"{self.object_name}-{suffix}"

    def holds_at(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)

    def holder(self) -> Holder:
        """What the live exporter knows about the pod: its spec, annotations and life."""
        annotations = {"sandbox.gpu-portal.dev/idle": "true"} if self.idle else {}
        pod = {
            "metadata": {"name": self.pod, "namespace": self.namespace, "annotations": annotations},
            "spec": {
                "containers": [
                    {"name": CONTAINER, "resources": {"limits": {self.resource: len(self.devices)}}}
                ]
            },
        }
        return Holder(pod, {"kind": self.kind, "started": self.start, "state": "running"})


def _suffix(job_id: int, what: str, length: int) -> str:
    return "".join(
        SUFFIX_ALPHABET[int(_hash01(job_id, what, i) * len(SUFFIX_ALPHABET)) % len(SUFFIX_ALPHABET)]
        for i in range(length)
    )


def _lanes(devices: list[Device], node_index: int, seed: int) -> list[list[Device]]:
    """Groups of devices that are always taken together by one job."""
    if any(d.mig_profile for d in devices):
        return [[d] for d in devices]
    size = LANE_SIZES[int(_hash01(seed, "lane", node_index) * len(LANE_SIZES))]
    return [devices[i : i + size] for i in range(0, len(devices), size)]


def simulate_workload(
    profile: dict[str, Any], *, seed: int, start: float, end: float
) -> list[SimJob]:
    """The jobs that held GPUs during [start, end), deterministic in (profile, seed, window).

    Job ids count up from 1 in start order, so they read like the portal's.
    """
    drafts: list[dict[str, Any]] = []
    for node_index, spec in enumerate(build_nodes(profile, seed, rfc3339(start))):
        node = spec.node["metadata"]["name"]
        if not spec.devices:
            continue
        for lane_index, lane in enumerate(_lanes(spec.devices, node_index, seed)):
            drafts.extend(_lane_jobs(lane, node, lane_index, seed, start, end))
    drafts.sort(key=lambda d: (d["start"], d["node"], d["devices"]))
    return [SimJob(job_id=i + 1, **d) for i, d in enumerate(drafts)]


def _lane_jobs(
    lane: list[Device], node: str, lane_index: int, seed: int, start: float, end: float
) -> Iterable[dict[str, Any]]:
    def h(*parts: object) -> float:
        return _hash01(seed, node, lane_index, *parts)

    first = lane[0]
    resource = mig_resource(first.mig_profile) if first.mig_profile else ANY_GPU
    # Some lanes are busy most of the day, a few mostly idle (where quota sits unused).
    busy_share = 0.35 + 0.6 * h("busy")
    t = start - 6 * 3600 * h("offset")
    n = 0
    while t < end:
        kind = "inference" if h(n, "kind") < 0.25 else "training"
        hours = 4 + 20 * h(n, "len") if kind == "inference" else 0.5 + 9.5 * h(n, "len") ** 2
        length = hours * 3600
        gap = length * (1 - busy_share) / busy_share * (0.5 + h(n, "gap"))
        t += gap
        job_end = t + length
        if t < end and job_end > start:
            team = TEAMS[int(h(n, "team") * len(TEAMS)) % len(TEAMS)]
            yield {
                "team": team,
                "name": f"{'serve' if kind == 'inference' else 'train'}-{team[:3]}",
                "kind": kind,
                "idle": h(n, "idle") < 0.08,
                "node": node,
                "product": first.model,
                "resource": resource,
                "devices": tuple(d.id for d in lane),
                "start": float(math.floor(t)),
                "end": float(math.floor(job_end)) if job_end < end else None,
            }
        t = job_end
        n += 1


@dataclass(frozen=True)
class HistoryStats:
    path: Path
    bytes: int
    samples: int
    series_per_step: int
    jobs: int
    start: float
    end: float
    step: int
    seconds: float


def history_write(
    out: Path,
    *,
    profile: dict[str, Any],
    seed: int = 0,
    hours: float = 24.0,
    step: int = 60,
    end: float | None = None,
    instance: str = "127.0.0.1:9400",
    families: Sequence[str] = PORTAL_FAMILIES,
    jobs: list[SimJob] | None = None,
) -> HistoryStats:
    """Write ``hours`` of history ending at ``end`` (default now) as OpenMetrics to ``out``.

    ``jobs`` defaults to ``simulate_workload`` over the same window.
    """
    started = time.monotonic()
    end = float(math.floor((time.time() if end is None else end) / step) * step)
    start = end - math.floor(hours * 3600 / step) * step
    if jobs is None:
        jobs = simulate_workload(profile, seed=seed, start=start, end=end)
    grid = [start + i * step for i in range(int((end - start) // step) + 1)]
    wanted = [f for f in FAMILIES if f[0] in families]
    extra = f',job="{SCRAPE_JOB}",instance="{instance}"'
    by_node: dict[str, list[SimJob]] = {}
    for job in jobs:
        by_node.setdefault(job.node, []).append(job)
    samples = 0
    series_now = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".history-") as tmp:
        parts: dict[str, IO[str]] = {
            name: open(Path(tmp) / name, "w", buffering=1 << 20)  # noqa: SIM115
            for name, _, _ in wanted
        }
        try:
            for spec in build_nodes(profile, seed, rfc3339(start)):
                node = spec.node["metadata"]["name"]
                if spec.devices:
                    counted = _write_node(
                        parts, node, spec.devices, by_node.get(node, []), grid, seed, extra
                    )
                    samples += counted[0]
                    series_now += counted[1]
        finally:
            for fh in parts.values():
                fh.close()
        with open(out, "w", buffering=1 << 20) as fh:
            for name, kind, help_text in wanted:
                fh.write(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
                with open(Path(tmp) / name) as part:
                    shutil.copyfileobj(part, fh, 1 << 20)
            fh.write("# EOF\n")
    return HistoryStats(
        path=out,
        bytes=out.stat().st_size,
        samples=samples,
        series_per_step=series_now,
        jobs=len(jobs),
        start=start,
        end=end,
        step=step,
        seconds=time.monotonic() - started,
    )


def _write_node(
    parts: dict[str, IO[str]],
    node: str,
    devices: list[Device],
    jobs: list[SimJob],
    grid: list[float],
    seed: int,
    extra: str,
) -> tuple[int, int]:
    """One node's samples, physical GPU by GPU, each series in time order.

    Returns (samples written, series at the last timestamp)."""
    by_gpu: dict[int, list[Device]] = {}
    for dev in devices:
        by_gpu.setdefault(dev.gpu, []).append(dev)
    holders = {id(job): job.holder() for job in jobs}
    samples = 0
    last = 0
    for _, devs in sorted(by_gpu.items()):
        ids = {d.id for d in devs}
        mine = [j for j in jobs if ids.intersection(j.devices)]
        # Lines per family, per series (label set): a series' samples must be contiguous
        # and in time order, so a GPU's lines are gathered before they are written.
        lines: dict[str, dict[str, list[str]]] = {name: {} for name in parts}
        for t in grid:
            holders_by_dev: dict[tuple[str, str], list[Holder]] = {}
            for job in mine:
                if job.holds_at(t):
                    for dev_id in job.devices:
                        holders_by_dev.setdefault((node, dev_id), []).append(holders[id(job)])
            stamp = f" {int(t)}\n"
            readings = gpu_readings(
                seed=seed,
                node=node,
                devs=devs,
                holders_by_dev=holders_by_dev,
                t=t,
                boot=grid[0],
                banked_energy=0.0,
            )
            now_count = 0
            for name, series in lines.items():
                for reading in readings:
                    value = reading.values.get(name)
                    if value is None:
                        continue
                    text = format_value(name, value) + stamp
                    for labels in reading.label_sets:
                        series.setdefault(labels, []).append(text)
                        now_count += 1
        last += now_count
        for name, series in lines.items():
            fh = parts[name]
            for labels, texts in series.items():
                prefix = f"{name}{{{labels}{extra}}} "
                fh.write("".join(prefix + text for text in texts))
                samples += len(texts)
    return samples, last


def main(argv: list[str] | None = None) -> int:
    """``python -m sandbox history``: write the history file and say what it holds."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m sandbox history",
        description="Write the DCGM series the exporter would have exposed over the past "
        "hours as OpenMetrics (for promtool tsdb create-blocks-from openmetrics).",
    )
    p.add_argument("--profile", default="dashboard", help="profile name or YAML path")
    p.add_argument("--hours", type=float, default=24.0, help="how far back")
    p.add_argument("--step", type=int, default=60, help="seconds between samples")
    p.add_argument("--end", type=float, default=None, help="Unix time of the last sample (now)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--instance", default="127.0.0.1:9400", help="the scrape target's label")
    p.add_argument("--out", required=True, help="OpenMetrics file to write")
    p.add_argument(
        "--families",
        default=",".join(PORTAL_FAMILIES),
        help="comma-separated metric families to write (default: every one the portal reads)",
    )
    args = p.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - {name for name, _, _ in FAMILIES})
    if unknown:
        p.error(f"unknown families: {', '.join(unknown)}")
    stats = history_write(
        Path(args.out),
        profile=load_profile(args.profile),
        seed=args.seed,
        hours=args.hours,
        step=args.step,
        end=args.end,
        instance=args.instance,
        families=families,
    )
    print(
        f"HISTORY WRITTEN {stats.path} bytes={stats.bytes} samples={stats.samples} "
        f"series={stats.series_per_step} jobs={stats.jobs} start={stats.start:.0f} "
        f"end={stats.end:.0f} step={stats.step} seconds={stats.seconds:.1f}",
        flush=True,
    )
    return 0
