"""On large clusters a cycle stops filtering once it has found enough feasible nodes,
as kube-scheduler does (percentageOfNodesToScore); failures still count every node."""

from __future__ import annotations

import pytest

from scheduling import ClusterSnapshot, Node, Taint, schedule
from scheduling.cycle import num_feasible_nodes_to_find

from .builders import node, pod

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    ("num_nodes", "percentage", "expected"),
    [
        (0, 0, 0),
        (50, 0, 50),  # below 100 nodes: every node
        (99, 10, 99),
        (100, 0, 100),  # 50% is 50, raised to the minimum of 100
        (250, 0, 120),  # 50 - 250/125 = 48%
        (1_000, 0, 420),  # 42%
        (5_000, 0, 500),  # 10%
        (6_000, 0, 300),  # 2% is below the 5% floor
        (20_000, 0, 1_000),
        (1_000, 30, 300),  # a configured percentage is used as it is
        (1_000, 5, 100),  # but never fewer than 100 nodes
        (1_000, 100, 1_000),
        (1_000, 150, 1_000),  # above 100 acts as 100
    ],
)
def test_num_feasible_nodes_to_find(num_nodes: int, percentage: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(num_nodes, percentage) == expected


def _nodes(count: int, pods: int = 110) -> list[Node]:
    return [node(f"n{i:04}", pods=pods) for i in range(count)]


def test_a_cycle_scores_only_the_nodes_it_needs_and_the_next_one_continues() -> None:
    # Given 300 empty nodes: a cycle looks for 144 feasible ones (48%)
    snapshot = ClusterSnapshot(_nodes(300))
    # When three pods are scheduled in turn
    first = schedule(pod("a", gpus=1), snapshot)
    assert sorted(first.scores) == [f"n{i:04}" for i in range(144)]
    assert snapshot.next_start_node_index == 144
    second = schedule(pod("b", gpus=1), snapshot)
    # Then each starts where the previous one stopped, wrapping round the end
    assert sorted(second.scores) == [f"n{i:04}" for i in range(144, 288)]
    third = schedule(pod("c", gpus=1), snapshot)
    assert set(third.scores) == {f"n{i:04}" for i in (*range(288, 300), *range(132))}
    assert snapshot.next_start_node_index == 132


def test_nodes_failing_a_filter_count_as_looked_at() -> None:
    # Given 300 nodes of which the first 100 carry a taint the pod does not tolerate
    nodes = [node(f"n{i:04}", taints=(GPU_TAINT,) if i < 100 else ()) for i in range(300)]
    snapshot = ClusterSnapshot(nodes)
    # When one pod is scheduled
    result = schedule(pod(gpus=1), snapshot)
    # Then it scored nodes 100–243 and the next cycle starts after them
    assert sorted(result.scores) == [f"n{i:04}" for i in range(100, 244)]
    assert snapshot.next_start_node_index == 244


def test_every_feasible_node_is_scored_with_percentage_100() -> None:
    snapshot = ClusterSnapshot(_nodes(300))
    result = schedule(pod(gpus=1), snapshot, percentage_of_nodes_to_score=100)
    assert len(result.scores) == 300
    assert snapshot.next_start_node_index == 0


def test_a_pod_that_fits_nowhere_reports_every_node() -> None:
    # Given 300 nodes: 200 full, 100 tainted
    nodes = [node(f"n{i:04}", taints=(GPU_TAINT,) if i % 3 == 0 else ()) for i in range(300)]
    bound = [pod(f"full-{i}", gpus=8, on=f"n{i:04}") for i in range(300) if i % 3]
    snapshot = ClusterSnapshot(nodes, bound)
    snapshot.next_start_node_index = 17
    # When a pod that fits on none of them is scheduled
    result = schedule(pod("big", gpus=8), snapshot)
    # Then the message counts all 300 and the preemption dry run saw every node
    assert result.message == (
        "0/300 nodes are available: 100 node(s) had untolerated taint(s), "
        "200 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/300 "
        "nodes are available: 100 Preemption is not helpful for scheduling, "
        "200 No preemption victims found for incoming pod."
    )
    assert len(result.node_reasons) == 300
    assert snapshot.next_start_node_index == 17


def test_the_search_takes_one_node_of_each_zone_in_turn() -> None:
    zones = ["a", "a", "a", "b", "b", "c"]
    nodes = [
        node(f"n{i}", labels={"topology.kubernetes.io/zone": zone}) for i, zone in enumerate(zones)
    ]
    snapshot = ClusterSnapshot(nodes)
    assert [n.name for n in snapshot.search_order] == ["n0", "n3", "n5", "n1", "n4", "n2"]


def test_replacing_a_node_drops_the_cached_filter_results() -> None:
    # Given a snapshot that has placed a pod of this shape on n0000
    snapshot = ClusterSnapshot(_nodes(3))
    assert schedule(pod("a", gpus=8), snapshot).node == "n0000"
    # When n0000 is tainted
    snapshot.add_node(node("n0000", taints=(GPU_TAINT,)))
    # Then the next pod of the same shape no longer lands there
    assert schedule(pod("b", gpus=8), snapshot).node == "n0001"


def test_free_and_label_index_follow_pods_in_and_out() -> None:
    snapshot = ClusterSnapshot(_nodes(2, pods=3))
    a = snapshot.add_pod(pod("a", gpus=3, labels={"app": "x"}), "n0000")
    assert snapshot.free("n0000")["nvidia.com/gpu"] == 5
    assert snapshot.free("n0000")["pods"] == 2
    assert list(snapshot.pods_labelled(["default"], "app", "x")) == [a]
    snapshot.remove_pod(a)
    assert snapshot.free("n0000") == {
        "cpu": 64_000,
        "memory": 512 * 2**30,
        "pods": 3,
        "nvidia.com/gpu": 8,
    }
    assert list(snapshot.pods_labelled(["default"], "app", "x")) == []
