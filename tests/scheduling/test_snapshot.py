from __future__ import annotations

import random

import pytest

from scheduling import ClusterSnapshot, Node, Pod, schedule

from .builders import node, pod


def test_add_and_remove_keep_usage_in_step() -> None:
    snapshot = ClusterSnapshot([node("n1", pods=3), node("n2")])
    snapshot.add_pod(pod("a", gpus=4, requests={"cpu": 1000}), node_name="n1")
    snapshot.add_pod(pod("b", gpus=2, on="n1"))
    assert snapshot.used("n1") == {"nvidia.com/gpu": 6, "cpu": 1000}
    assert snapshot.free("n1")["nvidia.com/gpu"] == 2
    assert snapshot.free("n1")["pods"] == 1
    assert snapshot.remove_pod("default/a") is not None
    assert snapshot.used("n1") == {"nvidia.com/gpu": 2}
    assert snapshot.remove_pod("default/a") is None
    assert [p.name for p in snapshot.pods_on("n1")] == ["b"]


def test_re_adding_a_pod_moves_it() -> None:
    snapshot = ClusterSnapshot([node("n1"), node("n2")])
    snapshot.add_pod(pod("a", gpus=4, on="n1"))
    snapshot.add_pod(pod("a", gpus=4, on="n2"))
    assert snapshot.used("n1") == {}
    assert snapshot.used("n2") == {"nvidia.com/gpu": 4}
    assert snapshot.node_of("default/a") == "n2"


def test_add_pod_to_unknown_node_is_an_error() -> None:
    snapshot = ClusterSnapshot([node("n1")])
    with pytest.raises(KeyError):
        snapshot.add_pod(pod("a", on="gone"))
    with pytest.raises(KeyError):
        snapshot.add_pod(pod("a"))


def test_pods_on_unknown_or_no_node_are_ignored_when_building() -> None:
    snapshot = ClusterSnapshot([node("n1")], [pod("a", gpus=8, on="gone"), pod("pending", gpus=8)])
    assert list(snapshot.pods) == []
    assert schedule(pod(gpus=8), snapshot).node == "n1"


def test_snapshot_and_bound_pods_together_is_an_error() -> None:
    snapshot = ClusterSnapshot([node("n1")])
    with pytest.raises(ValueError, match="inside the ClusterSnapshot"):
        schedule(pod(), snapshot, [pod("x", on="n1")])


def test_remove_node_returns_its_pods() -> None:
    snapshot = ClusterSnapshot([node("n1"), node("n2")], [pod("a", on="n1"), pod("b", on="n2")])
    assert [p.name for p in snapshot.remove_node("n1")] == ["a"]
    assert [n.name for n in snapshot.nodes] == ["n2"]
    assert [p.name for p in snapshot.pods] == ["b"]


def test_incremental_snapshot_matches_a_fresh_one() -> None:
    rng = random.Random(3)
    nodes = [node(f"n{i}", pods=20) for i in range(6)]
    snapshot = ClusterSnapshot(nodes)
    live: dict[str, Pod] = {}
    for step in range(300):
        if live and rng.random() < 0.4:
            key = rng.choice(sorted(live))
            snapshot.remove_pod(live.pop(key))
            continue
        p = pod(f"p{step}", gpus=rng.choice((1, 2, 4)), requests={"cpu": rng.randint(0, 9000)})
        placed = schedule(p, snapshot, strategy=rng.choice(("MostAllocated", "LeastAllocated")))
        if placed.node is not None:
            live[p.key] = snapshot.add_pod(p, node_name=placed.node)
    fresh = ClusterSnapshot(nodes, live.values())
    for n in nodes:
        assert snapshot.used(n.name) == fresh.used(n.name)
        assert snapshot.nonzero_used(n.name) == fresh.nonzero_used(n.name)
        assert snapshot.free(n.name)["nvidia.com/gpu"] >= 0
    probe = pod("probe", gpus=2)
    assert schedule(probe, snapshot) == schedule(probe, nodes, list(live.values()))


def _full_cluster() -> tuple[list[Node], list[Pod]]:
    nodes = [node(f"gpu-{i:04}", labels={"zone": f"z{i % 4}"}) for i in range(1000)]
    pods = [
        pod(f"job-{i}", gpus=1, on=f"gpu-{i // 8:04}", requests={"cpu": 2000}, priority=i % 3)
        for i in range(8000)
    ]
    return nodes, pods


def test_preemption_and_placement_on_a_full_1000_node_cluster() -> None:
    # Speed is measured in bench/bench_schedule.py, not here.
    nodes, pods = _full_cluster()
    snapshot = ClusterSnapshot(nodes, pods)
    urgent = pod("urgent", gpus=2, requests={"cpu": 4000}, priority=10)
    # Every node is full, so this exercises filtering plus a preemption dry run on
    # all 1,000 nodes: the slowest path.
    result = schedule(urgent, snapshot)
    assert result.nominated_node == "gpu-0000"
    # Among equal priorities the earliest-bound pod is reprieved first, as kube-scheduler
    # reprieves the earliest-started one.
    assert [v.name for v in result.victims] == ["job-3", "job-6"]
    assert schedule(urgent, nodes, pods).victims == result.victims

    snapshot.remove_pod("default/job-4000")
    snapshot.remove_pod("default/job-4001")
    small = pod("small", gpus=2)
    assert schedule(small, snapshot).node == "gpu-0500"
