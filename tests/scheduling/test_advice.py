from __future__ import annotations

from scheduling import (
    Advice,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Taint,
    explain,
    requested_gpu_products,
    schedule,
)
from scheduling.types import Node

from .builders import A100, H100, node, pod

PRODUCT = "nvidia.com/gpu.product"


def advise(p: Pod, nodes: list[Node], bound: list[Pod] | None = None) -> Advice:
    result = schedule(p, nodes, bound or [])
    return explain(p, result, nodes, bound or [])


def test_waiting_for_running_jobs() -> None:
    nodes = [node("a1"), node("a2"), node("a3"), node("h1", product=H100)]
    bound = [
        pod("r1", gpus=4, on="a1"),
        pod("r2", gpus=6, on="a2"),
        pod("r3", gpus=8, on="a3"),
    ]
    advice = advise(pod(gpus=8, node_selector={PRODUCT: A100}), nodes, bound)
    assert advice.text == (
        f"asks for 8 {A100} GPUs on one node; nodes with {A100}: 3, "
        "free now: 4 at most on one node; it will start when running jobs finish"
    )
    assert advice.can_ever_fit is True
    assert advice.matching_nodes == 3
    assert advice.max_free_on_one_node == {"nvidia.com/gpu": 4}
    assert advice.max_capacity_on_one_node == {"nvidia.com/gpu": 8}


def test_can_never_fit() -> None:
    nodes = [node("a1"), node("a2", gpus=4)]
    advice = advise(pod(gpus=16), nodes)
    assert advice.text == "can never fit: no node has 16 nvidia.com/gpu; the largest node has 8"
    assert advice.can_ever_fit is False
    assert advice.matching_nodes == 2


def test_can_never_fit_counts_only_matching_nodes() -> None:
    nodes = [node("a1", gpus=4), node("h1", product=H100, gpus=8)]
    advice = advise(pod(gpus=8, node_selector={PRODUCT: A100}), nodes)
    assert advice.text == (
        f"can never fit: no {A100} node has 8 nvidia.com/gpu; the largest {A100} node has 4"
    )
    assert advice.max_capacity_on_one_node == {"nvidia.com/gpu": 4}


def test_cpu_and_memory_that_can_never_fit_are_said_in_cpus_and_gib_on_both_sides() -> None:
    nodes = [node("a1", cpu=31_900), node("a2", cpu=16_000)]
    advice = advise(pod(requests={"cpu": 250_000}), nodes)
    assert advice.text == "can never fit: no node has 250 CPUs; the largest node has 31.9"
    advice = advise(pod(requests={"memory": 600 * 2**30}), [node("a1", memory=503 * 2**29)])
    assert advice.text == "can never fit: no node has 600 GiB memory; the largest node has 251.5"


def test_unknown_product() -> None:
    advice = advise(pod(gpus=1, node_selector={PRODUCT: "NVIDIA-X"}), [node("a1")])
    assert advice.text == "no node matches the GPU product NVIDIA-X"
    assert advice.matching_nodes == 0
    assert advice.can_ever_fit is False


def test_product_from_required_affinity() -> None:
    term = NodeSelectorTerm(
        match_expressions=(NodeSelectorRequirement(PRODUCT, "In", (H100, "NVIDIA-B200")),)
    )
    p = pod(gpus=1, required_node_affinity=(term,))
    assert requested_gpu_products(p) == (H100, "NVIDIA-B200")
    assert advise(p, [node("a1")]).text == f"no node matches the GPU product {H100} or NVIDIA-B200"


def test_every_matching_node_has_an_untolerated_taint() -> None:
    taint = Taint("dedicated", "llm-team", "NoSchedule")
    nodes = [node("a1", taints=(taint,)), node("a2", taints=(taint,))]
    advice = advise(pod(gpus=1), nodes)
    assert advice.text == "every matching node has the untolerated taint {dedicated: llm-team}"
    assert advice.matching_nodes == 0


def test_cordoned_nodes() -> None:
    advice = advise(pod(gpus=1), [node("a1", unschedulable=True)])
    assert advice.text.startswith("every matching node is cordoned")
    assert advice.can_ever_fit is True


def test_mig_request_without_product() -> None:
    mig = "nvidia.com/mig-1g.10gb"
    nodes = [node("m1", gpus=0, extra={mig: 7})]
    bound = [pod("r", requests={mig: 6}, on="m1")]
    advice = advise(pod(requests={mig: 2}), nodes, bound)
    assert advice.text == (
        f"asks for 2 {mig} on one node; matching nodes: 1, free now: 1 at most on one node; "
        "it will start when running jobs finish"
    )
    assert advice.max_free_on_one_node == {mig: 1}


def test_fits_and_preemption_texts() -> None:
    nodes = [node("a1")]
    assert advise(pod(gpus=1), nodes).text == "fits now: it will be placed on a1"
    bound = [pod("low", gpus=8, on="a1", priority=0)]
    assert advise(pod(gpus=8, priority=10), nodes, bound).text == (
        "will start on a1 once 1 lower-priority pod (default/low) is preempted"
    )


def test_a_capacity_is_never_shown_larger_than_it_is() -> None:
    from scheduling.quantity import human_number, human_quantity

    almost_64 = 63_996 * 2**30 // 1000
    assert human_number(almost_64, "memory", down=True) == "63.99"
    assert human_number(almost_64, "memory") == "64"  # a request, rounded as usual
    assert human_number(31_999, "cpu", down=True) == "31.999"
    assert human_quantity(4 * 2**20, "memory", down=True) == "0 GiB memory"
    assert human_quantity(1000, "cpu") == "1 CPU"
