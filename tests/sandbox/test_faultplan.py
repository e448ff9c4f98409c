"""A profile's fault rate (soak runs): GPU faults arrive at the rate asked, the same ones for
the same seed, through the same path as an injected fault, and are repaired after their
time; a bad ``faults`` section is refused naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox import faults
from sandbox.nodes import faultplan
from sandbox.profiles import load_profile
from sandbox.state import Cluster, Options
from tests.sandbox.offline import offline_cluster

RATES = {"gpuFailuresPerGpuHour": 0.5, "busyOnly": False, "repairAfter": "6h", "xids": [79, 48]}


def soak(tmp_path: Path, name: str, seed: int, hours: float, **rates: Any) -> Cluster:
    # Simulated time all but stands still between the soak's own steps (speed 0.001): the
    # seconds a loaded machine takes between passes would otherwise shift every fault's
    # moment, and with it which faults a seed gives.
    cluster = offline_cluster(
        tmp_path / f"{name}.sqlite3",
        load_profile("small"),
        Options(seed=seed, speed=0.001, faults={**RATES, **rates}),
    )
    for _ in range(int(hours * 60)):
        cluster.clock.advance(60)
        faultplan.reconcile(cluster)
    return cluster


def struck(cluster: Cluster) -> list[tuple[str, int]]:
    """The faults as the sandbox's fault endpoint lists them: (node/gpu, xid), in order."""
    found = [
        (cluster.store.meta_get(k), k[len("fault/") :]) for k in cluster.store.meta_keys("fault/")
    ]
    return [(where, fault["xid"]) for fault, where in sorted(found, key=lambda f: f[0]["at"])]


def test_gpu_faults_arrive_at_the_rate_the_same_for_a_seed(tmp_path: Path) -> None:
    # Given the small profile's GPUs failing at 1 per GPU-hour for four simulated hours,
    # each back in service a minute later
    first = soak(tmp_path, "a", seed=7, hours=4, gpuFailuresPerGpuHour=1.0, repairAfter="1m")
    gpus = sum(
        len({d.gpu for d in first.devices(node["metadata"]["name"])})
        for node in first.store.iter("nodes")
    )
    # Then about rate × GPUs × hours faults happened (a Poisson count: within 3 sigma)...
    count = first.store.meta_get(faultplan.STATE)["n"]["gpu"]
    expected = 1.0 * gpus * 4
    assert abs(count - expected) <= 3 * expected**0.5, (count, expected)
    # ...each through the injection path (the newest per GPU is what the sandbox lists),
    # with one of the XIDs asked for
    faults_a = struck(first)
    assert faults_a and {xid for _, xid in faults_a} == {79, 48}
    # ...the same faults for the same seed, others for another
    assert (
        struck(soak(tmp_path, "b", seed=7, hours=4, gpuFailuresPerGpuHour=1.0, repairAfter="1m"))
        == faults_a
    )
    assert (
        struck(soak(tmp_path, "c", seed=8, hours=4, gpuFailuresPerGpuHour=1.0, repairAfter="1m"))
        != faults_a
    )


def test_a_struck_gpu_is_out_of_service_until_repaired(tmp_path: Path) -> None:
    cluster = soak(tmp_path, "u", seed=3, hours=1)
    for where, _ in struck(cluster):
        assert faults.gpu_fault(cluster, *_split(where))["healthy"] is False


def test_failed_gpus_are_repaired_and_an_idle_cluster_is_spared(tmp_path: Path) -> None:
    # Given faults repaired after 30 minutes: after 3 hours at most the last half hour's
    # are still out
    cluster = soak(tmp_path, "r", seed=1, hours=3, repairAfter="30m")
    out = [
        f for f, _ in struck(cluster) if faults.gpu_fault(cluster, *_split(f))["healthy"] is False
    ]
    assert len(struck(cluster)) > len(out)
    # And busyOnly (the default) strikes only GPUs pods hold: an empty cluster has none
    idle = soak(tmp_path, "i", seed=1, hours=2, busyOnly=True)
    assert struck(idle) == []


def _split(where: str) -> tuple[str, int]:
    node, gpu = where.split("/")
    return node, int(gpu)


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"gpuFailuresPerHour": 1}, "faults.gpuFailuresPerHour: unknown"),
        ({"gpuFailuresPerGpuHour": -1}, "faults.gpuFailuresPerGpuHour: a number"),
        ({"xids": [13]}, "faults.xids: 13 is not one of"),
    ],
)
def test_a_bad_faults_section_names_the_key(section: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        faultplan.check_config(section)
