"""The simulated DCGM history: promtool backfills it, and its samples are the live exporter's."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

from sandbox import dcgm
from sandbox.history import PORTAL_FAMILIES, SimJob, history_write, simulate_workload
from sandbox.profiles import load_profile
from sandbox.state import Options
from tests.sandbox.offline import offline_cluster

END = 1_750_000_020.0  # a whole minute
LINE = re.compile(r"^(\w+)\{(.*)\} (\S+) (\d+)$")


class FixedClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def wall(self, sim_time: float) -> float:
        return sim_time  # stopped: simulated and wall time are one

    def sim(self, wall_time: float) -> float:
        return wall_time


def _parse(path: Path) -> dict[tuple[str, str, int], str]:
    """(family, labels without job/instance, timestamp) → value text."""
    found: dict[tuple[str, str, int], str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        match = LINE.match(line)
        assert match, line
        name, labels, value, ts = match.groups()
        labels = labels.replace(',job="dcgm-exporter",instance="127.0.0.1:9400"', "")
        found[(name, labels, int(ts))] = value
    return found


def _live_exporter(tmp_path: Path, jobs: list[SimJob], t: float) -> dict[tuple[str, str], str]:
    """render() of an in-process sandbox whose pods are ``jobs``, its clock stopped at ``t``."""
    cluster = offline_cluster(
        tmp_path / "state.sqlite3", load_profile("small"), Options(seed=0), clock=FixedClock(t)
    )
    store = cluster.store
    for i, job in enumerate(jobs):
        holder = job.holder()
        uid = f"uid-{i}"
        pod = {**holder.pod, "metadata": {**holder.pod["metadata"], "uid": uid}}
        store.put("pods", pod)
        store.meta_set(f"assign/{uid}", {"node": job.node, "devices": list(job.devices)})
        store.meta_set(f"life/{uid}", holder.life)
    text = dcgm.render(cluster)
    store.close()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, rest = line.split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        samples[(name, labels)] = value
    return samples


def _jobs() -> list[SimJob]:
    """A busy 2-GPU training job, an idle one, an inference job on a MIG slice, and one that
    started 20 s before the compared instant (its lagged temperature is still catching up)."""
    profile = load_profile("small")
    from sandbox.profiles import build_nodes

    nodes = {s.node["metadata"]["name"]: s.devices for s in build_nodes(profile, 0, "")}
    a100 = nodes["gpu-a100-0"]
    mig = nodes["gpu-a100-mig-0"]

    def job(
        job_id: int, kind: str, node: str, devices: list[str], start: float, **kw: bool
    ) -> SimJob:
        return SimJob(
            job_id=job_id,
            team="vision",
            name="train-vis" if kind == "training" else "serve-vis",
            kind=kind,
            idle=kw.get("idle", False),
            node=node,
            product="NVIDIA-A100-SXM4-80GB",
            resource="nvidia.com/gpu",
            devices=tuple(devices),
            start=start,
            end=None,
        )

    return [
        job(1, "training", "gpu-a100-0", [a100[0].id, a100[1].id], END - 3000),
        job(2, "training", "gpu-a100-0", [a100[2].id], END - 2000, idle=True),
        job(3, "inference", "gpu-a100-mig-0", [mig[0].id], END - 1500),
        job(4, "training", "gpu-a100-1", [nodes["gpu-a100-1"][5].id], END - 20),
    ]


def test_history_samples_equal_the_live_exporter_for_the_same_workload_and_time(
    tmp_path: Path,
) -> None:
    # Given a workload, its history ending at END, and a live exporter at END running it
    jobs = _jobs()
    out = tmp_path / "history.om"
    stats = history_write(out, profile=load_profile("small"), hours=1, step=60, end=END, jobs=jobs)
    history = _parse(out)
    live = _live_exporter(tmp_path, jobs, END)
    # Then every series the exporter shows at END for the portal's families is in the
    # history at END with the same value, and nothing more
    at_end = {(n, labels): v for (n, labels, ts), v in history.items() if ts == int(END)}
    wanted = {k: v for k, v in live.items() if k[0] in PORTAL_FAMILIES}
    assert at_end == wanted
    assert stats.series_per_step == len(wanted)
    # And held devices carry the pod's labels, MIG slices their instance labels
    held = [k for k in at_end if 'pod="train-vis-1-' in k[1]]
    assert len(held) == 2 * len(PORTAL_FAMILIES)
    assert any('GPU_I_PROFILE="' in k[1] and 'namespace="team-vision"' in k[1] for k in at_end)


def test_history_has_one_sample_per_step_and_series_in_time_order(tmp_path: Path) -> None:
    out = tmp_path / "history.om"
    history_write(out, profile=load_profile("small"), hours=0.5, step=60, end=END, jobs=_jobs())
    text = out.read_text()
    # OpenMetrics: HELP/TYPE before each family, seconds timestamps, # EOF at the end
    assert text.startswith("# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n")
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" in text
    assert text.endswith("# EOF\n")
    last: dict[tuple[str, str], int] = {}
    for (name, labels, ts), _ in _parse(out).items():
        assert last.get((name, labels), -1) < ts
        last[(name, labels)] = ts
    stamps = {ts for _, _, ts in _parse(out)}
    assert stamps == {int(END) - 60 * i for i in range(31)}


def test_simulated_workload_is_deterministic_and_names_pods_like_the_portal() -> None:
    profile = load_profile("small")
    first = simulate_workload(profile, seed=0, start=END - 86400, end=END)
    again = simulate_workload(profile, seed=0, start=END - 86400, end=END)
    assert first == again and len(first) > 10
    assert {j.namespace for j in first} <= {
        f"team-{t}" for t in ("vision", "nlp", "speech", "recsys", "robotics", "research")
    }
    for job in first:
        assert job.pod.startswith(job.object_name + "-")
        assert job.start < END and (job.end is None or job.end > END - 86400)
    # No two jobs hold the same device at the same time
    by_device: dict[str, list[SimJob]] = {}
    for job in first:
        for dev in job.devices:
            by_device.setdefault(dev, []).append(job)
    for held in by_device.values():
        held.sort(key=lambda j: j.start)
        for a, b in itertools.pairwise(held):
            assert a.end is not None and a.end <= b.start


def test_promtool_backfills_the_history(tmp_path: Path) -> None:
    # Given an hour of history of the small profile's simulated workload
    out = tmp_path / "history.om"
    stats = history_write(out, profile=load_profile("small"), hours=1, step=60, end=END)
    # When promtool turns it into TSDB blocks
    result = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(out), str(tmp_path / "db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then it accepts every sample
    assert result.returncode == 0, result.stderr
    counts = [int(line.split()[4]) for line in result.stdout.splitlines()[1:] if line.strip()]
    assert sum(counts) == stats.samples
