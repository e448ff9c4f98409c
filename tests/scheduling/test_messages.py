"""The FailedScheduling text must be byte-for-byte what kube-scheduler writes."""

from __future__ import annotations

import pytest

from scheduling import Taint, fit_error_message, schedule

from .builders import A100, H100, node, pod

CONTROL_PLANE = Taint("node-role.kubernetes.io/control-plane", "", "NoSchedule")


def test_example_from_k8s_notes() -> None:
    nodes = [
        node("gpu-1"),
        node("gpu-2"),
        node("gpu-3"),
        node("gpu-4"),
        node("h100-1", product=H100),
        node("control-plane", taints=(CONTROL_PLANE,), gpus=0),
    ]
    bound = [pod(f"train-{i}", gpus=6, on=f"gpu-{i}", priority=100) for i in range(1, 5)]
    p = pod("big", gpus=4, node_selector={"nvidia.com/gpu.product": A100}, priority=100)
    result = schedule(p, nodes, bound)
    assert result.message == (
        "0/6 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint(s), 4 Insufficient nvidia.com/gpu. "
        "no new claims to deallocate, preemption: 0/6 nodes are available: "
        "2 Preemption is not helpful for scheduling, "
        "4 No preemption victims found for incoming pod."
    )
    assert result.reasons == {
        "node(s) didn't match Pod's node affinity/selector": 1,
        "node(s) had untolerated taint(s)": 1,
        "Insufficient nvidia.com/gpu": 4,
    }
    assert result.node_reasons["control-plane"].startswith("node(s) had untolerated taint")


def test_counts_are_sorted_as_strings_so_10_comes_before_2() -> None:
    nodes = [node(f"full-{i:02}") for i in range(10)] + [
        node("cordoned-1", unschedulable=True),
        node("cordoned-2", unschedulable=True),
    ]
    bound = [pod(f"p{i}", gpus=8, on=f"full-{i:02}") for i in range(10)]
    result = schedule(pod(gpus=1, preemption_policy="Never"), nodes, bound)
    assert result.message.startswith(
        "0/12 nodes are available: 10 Insufficient nvidia.com/gpu, 2 node(s) were unschedulable."
    )


@pytest.mark.parametrize(
    ("num_nodes", "reasons", "text"),
    [
        (3, {"b": 1, "a": 1}, "0/3 nodes are available: 1 a, 1 b."),
        (12, {"x": 2, "y": 10}, "0/12 nodes are available: 10 y, 2 x."),
        (3, {"x": 0, "y": 3}, "0/3 nodes are available: 3 y."),
    ],
)
def test_fit_error_message(num_nodes: int, reasons: dict[str, int], text: str) -> None:
    assert fit_error_message(num_nodes, reasons) == text


def test_message_is_empty_when_the_pod_fits() -> None:
    result = schedule(pod(gpus=1), [node("n1")], [])
    assert result.node == "n1"
    assert result.message == ""
    assert result.reasons == {}


def test_no_nodes_at_all() -> None:
    result = schedule(pod(gpus=1), [], [])
    assert result.node is None
    assert result.message == "no nodes available to schedule pods"


def test_several_insufficient_resources_appear_once_per_node_each() -> None:
    nodes = [node("n1", gpus=1, cpu=1000), node("n2", gpus=1, cpu=1000)]
    result = schedule(pod(gpus=2, requests={"cpu": 2000}, preemption_policy="Never"), nodes, [])
    assert result.message.startswith(
        "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient nvidia.com/gpu."
    )
