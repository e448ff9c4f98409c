from __future__ import annotations

import pytest

from scheduling import (
    LabelSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    PreferredSchedulingTerm,
    Taint,
    Toleration,
    WeightedPodAffinityTerm,
    schedule,
)
from scheduling.types import Strategy

from .builders import node, pod


def prefer(weight: int, key: str, value: str) -> PreferredSchedulingTerm:
    requirement = NodeSelectorRequirement(key=key, operator="In", values=(value,))
    return PreferredSchedulingTerm(weight, NodeSelectorTerm(match_expressions=(requirement,)))


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("MostAllocated", "busy"),  # bin-pack: fill the node that is already in use
        ("LeastAllocated", "idle"),  # spread: go where most is free
    ],
)
def test_resource_strategy(strategy: Strategy, expected: str) -> None:
    nodes = [node("idle"), node("busy")]
    bound = [pod("running", gpus=4, on="busy", requests={"cpu": 16_000, "memory": 2**36})]
    result = schedule(pod(gpus=2), nodes, bound, strategy=strategy)
    assert result.node == expected
    assert set(result.scores) == {"idle", "busy"}
    assert result.scores["busy"] != result.scores["idle"]


def test_most_allocated_packs_a_sequence_of_pods_onto_one_node() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    bound: list[Pod] = []
    for i in range(4):
        placed = schedule(pod(f"p{i}", gpus=2), nodes, bound)
        assert placed.node is not None
        bound.append(pod(f"p{i}", gpus=2, on=placed.node))
    assert {p.node_name for p in bound} == {"n1"}


def test_least_allocated_spreads_a_sequence_of_pods() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    bound: list[Pod] = []
    for i in range(3):
        placed = schedule(pod(f"p{i}", gpus=2), nodes, bound, strategy="LeastAllocated")
        assert placed.node is not None
        bound.append(pod(f"p{i}", gpus=2, on=placed.node))
    assert sorted(str(p.node_name) for p in bound) == ["n1", "n2", "n3"]


def test_fit_score_values_follow_the_formulas() -> None:
    # gpu 8: 2 used + 2 asked = 4/8; cpu 64000: 100m default + 100m default; memory alike
    nodes = [node("n1")]
    bound = [pod("x", gpus=2, on="n1")]
    most = schedule(pod(gpus=2), nodes, bound, scored_resources={"nvidia.com/gpu": 1})
    least = schedule(
        pod(gpus=2), nodes, bound, strategy="LeastAllocated", scored_resources={"nvidia.com/gpu": 1}
    )
    # TaintToleration contributes 3*100 on an untainted node; the rest is NodeResourcesFit.
    assert most.scores == {"n1": 300 + 50}
    assert least.scores == {"n1": 300 + 50}
    bound = [pod("x", gpus=6, on="n1")]
    assert schedule(pod(gpus=1), nodes, bound, scored_resources={"nvidia.com/gpu": 1}).scores == {
        "n1": 300 + 7 * 100 // 8
    }


def test_unrequested_extended_resources_do_not_steer_cpu_pods() -> None:
    # Default scoring includes nvidia.com/gpu, but a CPU-only pod must not be pulled
    # to a node just because its GPUs are busy.
    nodes = [node("gpus-busy"), node("gpus-idle")]
    bound = [pod("train", gpus=8, on="gpus-busy")]
    result = schedule(pod(requests={"cpu": 1000}), nodes, bound)
    assert result.scores["gpus-busy"] == result.scores["gpus-idle"]
    assert result.node == "gpus-busy"  # tie → name order


def test_preferred_node_affinity_weight_wins_over_bin_packing() -> None:
    nodes = [node("a100", labels={"tier": "gold"}), node("busy")]
    bound = [pod("running", gpus=6, on="busy")]
    p = pod(gpus=1, preferred_node_affinity=(prefer(50, "tier", "gold"),))
    result = schedule(p, nodes, bound)
    assert result.node == "a100"
    assert result.scores["a100"] - result.scores["busy"] > 0


def test_preferred_node_affinity_is_normalised_by_the_best_node() -> None:
    nodes = [
        node("both", labels={"tier": "gold", "disk": "nvme"}),
        node("gold", labels={"tier": "gold"}),
        node("none"),
    ]
    p = pod(preferred_node_affinity=(prefer(30, "tier", "gold"), prefer(10, "disk", "nvme")))
    scores = schedule(p, nodes, [], scored_resources={}).scores
    # 2 × (40·100/40, 30·100/40, 0) + 3 × 100 for taints
    assert scores == {"both": 300 + 200, "gold": 300 + 150, "none": 300}


def test_fewer_prefer_no_schedule_taints_win() -> None:
    soft = Taint("spot", "true", "PreferNoSchedule")
    other = Taint("old-driver", "", "PreferNoSchedule")
    nodes = [node("two", taints=(soft, other)), node("one", taints=(soft,)), node("zero")]
    result = schedule(pod(), nodes, [], scored_resources={})
    assert result.scores == {"two": 0, "one": 150, "zero": 300}
    assert result.node == "zero"
    tolerant = pod(tolerations=(Toleration("", "Exists"),))
    assert len(set(schedule(tolerant, nodes, [], scored_resources={}).scores.values())) == 1


def test_preferred_anti_affinity_avoids_nodes_with_matching_pods() -> None:
    nodes = [node("n1"), node("n2")]
    bound = [pod("ps-0", gpus=4, on="n1", labels={"app": "ps"})]
    term = PodAffinityTerm(LabelSelector((("app", "ps"),)))
    p = pod(gpus=1, preferred_pod_anti_affinity=(WeightedPodAffinityTerm(100, term),))
    result = schedule(p, nodes, bound)
    # Bin-packing alone would choose n1; the 2×100 anti-affinity spread beats it.
    assert schedule(pod(gpus=1), nodes, bound).node == "n1"
    assert result.node == "n2"


def test_ties_go_to_the_smallest_node_name() -> None:
    nodes = [node("gpu-b"), node("gpu-c"), node("gpu-a")]
    result = schedule(pod(gpus=1), nodes, [])
    assert len(set(result.scores.values())) == 1
    assert result.node == "gpu-a"
