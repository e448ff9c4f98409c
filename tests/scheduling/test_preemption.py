from __future__ import annotations

import pytest

from scheduling import LabelSelector, Pod, PodAffinityTerm, Taint, schedule

from .builders import node, pod


def keys(pods: tuple[Pod, ...]) -> list[str]:
    return [p.name for p in pods]


def test_high_priority_preempts_only_what_it_needs() -> None:
    nodes = [node("n1")]
    bound = [
        pod("low-4", gpus=4, on="n1", priority=10),
        pod("low-2", gpus=2, on="n1", priority=10),
        pod("mid-2", gpus=2, on="n1", priority=50),
    ]
    result = schedule(pod("urgent", gpus=4, priority=100), nodes, bound)
    assert result.node is None
    assert result.nominated_node == "n1"
    # Removing low-4 alone frees 4 GPUs; mid-2 (more important) is reprieved first,
    # then low-2 fits back too.
    assert keys(result.victims) == ["low-4"]
    assert result.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_reprieve_keeps_the_more_important_pods() -> None:
    nodes = [node("n1")]
    bound = [
        pod("a", gpus=2, on="n1", priority=1),
        pod("b", gpus=2, on="n1", priority=2),
        pod("c", gpus=2, on="n1", priority=3),
        pod("d", gpus=2, on="n1", priority=4),
    ]
    result = schedule(pod("urgent", gpus=4, priority=100), nodes, bound)
    assert keys(result.victims) == ["b", "a"]  # most important victim first


def test_equal_priority_is_not_a_victim() -> None:
    nodes = [node("n1")]
    bound = [pod("peer", gpus=8, on="n1", priority=100)]
    result = schedule(pod("me", gpus=1, priority=100), nodes, bound)
    assert result.nominated_node is None
    assert result.victims == ()
    assert result.message.endswith(
        " no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption "
        "victims found for incoming pod."
    )


def test_never_policy_does_not_preempt() -> None:
    nodes = [node("n1")]
    bound = [pod("low", gpus=8, on="n1", priority=0)]
    p = pod("polite", gpus=8, priority=1000, preemption_policy="Never")
    result = schedule(p, nodes, bound)
    assert result.nominated_node is None
    assert result.victims == ()
    # kube-scheduler's PostFilter message for preemptionPolicy: Never.
    assert result.message == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never."
    )


def test_taint_failing_node_is_not_helpful_even_with_low_priority_pods() -> None:
    nodes = [node("tainted", taints=(Taint("dedicated", "infra"),))]
    bound = [pod("low", gpus=8, on="tainted", priority=0)]
    result = schedule(pod("urgent", gpus=8, priority=1000), nodes, bound)
    assert result.nominated_node is None
    assert result.preemption_reasons == {"Preemption is not helpful for scheduling": 1}


def test_node_still_too_small_after_removing_all_victims_reports_the_filter_reason() -> None:
    # kube-scheduler's SelectVictimsOnNode returns the filter status in this case.
    nodes = [node("n1", gpus=4)]
    bound = [pod("low", gpus=2, on="n1", priority=0)]
    result = schedule(pod("huge", gpus=8, priority=1000), nodes, bound)
    assert result.nominated_node is None
    assert result.message == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "no new claims to deallocate, preemption: 0/1 nodes are available: 1 Insufficient "
        "nvidia.com/gpu."
    )


@pytest.mark.parametrize(
    ("bound", "expected_node", "expected_victims"),
    [
        # fewest highest-priority victim: n2's victim has priority 5 < n1's 50
        (
            [pod("a", gpus=8, on="n1", priority=50), pod("b", gpus=8, on="n2", priority=5)],
            "n2",
            ["b"],
        ),
        # same highest priority → smallest sum (with the 2^31 offset: fewer pods)
        (
            [
                pod("a1", gpus=4, on="n1", priority=5),
                pod("a2", gpus=4, on="n1", priority=5),
                pod("b", gpus=8, on="n2", priority=5),
            ],
            "n2",
            ["b"],
        ),
        # everything equal → node name
        (
            [pod("a", gpus=8, on="n2", priority=5), pod("b", gpus=8, on="n1", priority=5)],
            "n1",
            ["b"],
        ),
    ],
)
def test_choice_of_node_follows_kube_scheduler_order(
    bound: list[Pod], expected_node: str, expected_victims: list[str]
) -> None:
    nodes = [node("n1"), node("n2")]
    result = schedule(pod("urgent", gpus=8, priority=100), nodes, bound)
    assert result.nominated_node == expected_node
    assert keys(result.victims) == expected_victims


def test_too_many_pods_preempts_one_small_pod() -> None:
    nodes = [node("n1", pods=3)]
    bound = [pod(f"p{i}", on="n1", priority=i) for i in range(3)]
    result = schedule(pod("urgent", priority=10), nodes, bound)
    assert keys(result.victims) == ["p0"]


def test_anti_affinity_conflict_can_be_preempted() -> None:
    term = PodAffinityTerm(LabelSelector((("app", "ps"),)))
    nodes = [node("n1")]
    bound = [pod("ps-old", on="n1", labels={"app": "ps"}, priority=0), pod("other", on="n1")]
    p = pod("ps-new", priority=10, required_pod_anti_affinity=(term,))
    result = schedule(p, nodes, bound)
    assert result.node is None
    assert result.nominated_node == "n1"
    assert keys(result.victims) == ["ps-old"]


def test_schedule_does_not_change_the_snapshot() -> None:
    nodes = [node("n1")]
    bound = [pod("low", gpus=8, on="n1", priority=0)]
    from scheduling import ClusterSnapshot

    snapshot = ClusterSnapshot(nodes, bound)
    schedule(pod("urgent", gpus=8, priority=9), snapshot)
    assert snapshot.used("n1") == {"nvidia.com/gpu": 8}
    assert [p.name for p in snapshot.pods_on("n1")] == ["low"]
