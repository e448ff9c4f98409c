"""Each filter on its own: one node, one pod, does it pass and with which reason."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling import (
    LabelSelector,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    Taint,
    Toleration,
    schedule,
)
from scheduling.matching import FILTER_EFFECTS, REASON_UNTOLERATED_TAINT, first_untolerated_taint

from .builders import A100, H100, node, pod

AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ANTI = "node(s) didn't match pod anti-affinity rules"


def reason_on(n: Node, p: Pod, bound: list[Pod] | None = None) -> str | None:
    """None when the pod fits on the single node ``n``, else that node's first reason."""
    result = schedule(p, [n], bound or [])
    if result.node == n.name:
        return None
    return result.node_reasons[n.name]


def req(key: str, op: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=op, values=values)  # type: ignore[arg-type]


def term(*reqs: NodeSelectorRequirement) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=reqs)


# -- node affinity -------------------------------------------------------------

LABELS = {"nvidia.com/gpu.product": A100, "nvidia.com/gpu.memory": "81920", "zone": "a"}


@pytest.mark.parametrize(
    ("requirement", "fits"),
    [
        (req("nvidia.com/gpu.product", "In", A100, H100), True),
        (req("nvidia.com/gpu.product", "In", H100), False),
        (req("missing", "In", "x"), False),
        (req("nvidia.com/gpu.product", "NotIn", H100), True),
        (req("nvidia.com/gpu.product", "NotIn", A100), False),
        (req("missing", "NotIn", "x"), True),
        (req("zone", "Exists"), True),
        (req("missing", "Exists"), False),
        (req("missing", "DoesNotExist"), True),
        (req("zone", "DoesNotExist"), False),
        (req("nvidia.com/gpu.memory", "Gt", "40000"), True),
        (req("nvidia.com/gpu.memory", "Gt", "81920"), False),
        (req("nvidia.com/gpu.memory", "Lt", "100000"), True),
        (req("nvidia.com/gpu.memory", "Lt", "81920"), False),
        # Gt/Lt compare integers, not strings: "81920" < "9" as text but not as numbers.
        (req("nvidia.com/gpu.memory", "Gt", "9"), True),
        (req("zone", "Gt", "1"), False),  # non-integer label never matches
        (req("nvidia.com/gpu.memory", "Gt", "x"), False),
        (req("missing", "Lt", "5"), False),
    ],
)
def test_required_node_affinity_operators(requirement: NodeSelectorRequirement, fits: bool) -> None:
    n = node("n1", labels=LABELS)
    p = pod(required_node_affinity=(term(requirement),))
    assert reason_on(n, p) == (None if fits else AFFINITY)


@pytest.mark.parametrize(
    ("terms", "fits"),
    [
        # terms are ORed
        ((term(req("zone", "In", "b")), term(req("zone", "In", "a"))), True),
        ((term(req("zone", "In", "b")), term(req("zone", "In", "c"))), False),
        # expressions in a term are ANDed
        ((term(req("zone", "In", "a"), req("nvidia.com/gpu.product", "In", A100)),), True),
        ((term(req("zone", "In", "a"), req("nvidia.com/gpu.product", "In", H100)),), False),
        # a term with no expressions matches nothing
        ((term(),), False),
        ((NodeSelectorTerm(match_fields=(req("metadata.name", "In", "n1"),)),), True),
        ((NodeSelectorTerm(match_fields=(req("metadata.name", "NotIn", "n1"),)),), False),
    ],
)
def test_required_node_affinity_terms(terms: tuple[NodeSelectorTerm, ...], fits: bool) -> None:
    n = node("n1", labels=LABELS)
    assert reason_on(n, pod(required_node_affinity=terms)) == (None if fits else AFFINITY)


@pytest.mark.parametrize(
    ("selector", "affinity", "fits"),
    [
        ({"zone": "a"}, (), True),
        ({"zone": "b"}, (), False),
        ({"zone": "a", "nvidia.com/gpu.product": A100}, (), True),
        ({"zone": "a", "nvidia.com/gpu.product": H100}, (), False),
        # nodeSelector AND affinity
        ({"zone": "a"}, (term(req("zone", "In", "b")),), False),
        ({"zone": "b"}, (term(req("zone", "In", "a")),), False),
        ({"zone": "a"}, (term(req("zone", "In", "a")),), True),
    ],
)
def test_node_selector_is_anded_with_affinity(
    selector: dict[str, str], affinity: tuple[NodeSelectorTerm, ...], fits: bool
) -> None:
    n = node("n1", labels=LABELS)
    p = pod(node_selector=selector, required_node_affinity=affinity)
    assert reason_on(n, p) == (None if fits else AFFINITY)


# -- taints and tolerations ----------------------------------------------------

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


MAINTENANCE = Taint("maintenance", "", "NoExecute")
CONTROL_PLANE_TAINT = Taint("node-role.kubernetes.io/control-plane", "", "NoSchedule")


@pytest.mark.parametrize(
    ("taints", "tolerations", "blocking"),
    [
        ((GPU_TAINT,), (), GPU_TAINT),
        ((GPU_TAINT,), (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"),), None),
        ((GPU_TAINT,), (Toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule"),), GPU_TAINT),
        ((GPU_TAINT,), (Toleration("nvidia.com/gpu", "Exists"),), None),
        ((GPU_TAINT,), (Toleration("", "Exists"),), None),  # empty key + Exists: everything
        ((GPU_TAINT,), (Toleration("nvidia.com/gpu", "Equal", "present", ""),), None),
        ((GPU_TAINT,), (Toleration("nvidia.com/gpu", "Exists", effect="NoExecute"),), GPU_TAINT),
        ((MAINTENANCE,), (), MAINTENANCE),
        ((MAINTENANCE,), (Toleration("maintenance", "Exists"),), None),
        ((Taint("spot", "true", "PreferNoSchedule"),), (), None),  # ignored by the filter
        # the FIRST untolerated taint is the one the advice names
        ((Taint("a", "1"), Taint("b", "2")), (Toleration("a", "Exists"),), Taint("b", "2")),
        ((CONTROL_PLANE_TAINT,), (), CONTROL_PLANE_TAINT),
    ],
)
def test_taint_toleration(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...], blocking: Taint | None
) -> None:
    # kube-scheduler 1.35 words every untolerated taint alike; which one blocks is the
    # portal's advice's to say
    n = node("n1", taints=taints)
    expected = REASON_UNTOLERATED_TAINT if blocking else None
    assert reason_on(n, pod(gpus=1, tolerations=tolerations)) == expected
    assert first_untolerated_taint(taints, tolerations, FILTER_EFFECTS) == blocking


@pytest.mark.parametrize(
    ("tolerations", "reason"),
    [
        ((), "node(s) were unschedulable"),
        ((Toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule"),), None),
        ((Toleration("", "Exists"),), None),
        (
            (Toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoExecute"),),
            "node(s) were unschedulable",
        ),
    ],
)
def test_cordoned_node(tolerations: tuple[Toleration, ...], reason: str | None) -> None:
    n = node("n1", unschedulable=True)
    assert reason_on(n, pod(tolerations=tolerations)) == reason


def test_filters_run_in_kube_scheduler_order() -> None:
    """Unschedulable, then TaintToleration, then NodeAffinity, then resources."""
    everything_wrong: dict[str, Any] = {
        "taints": (Taint("t", "v"),),
        "unschedulable": True,
        "labels": {"zone": "b"},
        "gpus": 1,
    }
    p = pod(gpus=4, node_selector={"zone": "a"})
    assert reason_on(node("n", **everything_wrong), p) == "node(s) were unschedulable"
    everything_wrong["unschedulable"] = False
    assert reason_on(node("n", **everything_wrong), p) == REASON_UNTOLERATED_TAINT
    everything_wrong["taints"] = ()
    assert reason_on(node("n", **everything_wrong), p) == AFFINITY
    everything_wrong["labels"] = {"zone": "a"}
    assert reason_on(node("n", **everything_wrong), p) == "Insufficient nvidia.com/gpu"


# -- resources -----------------------------------------------------------------

MIG = "nvidia.com/mig-1g.10gb"
SHARED = "nvidia.com/gpu.shared"


@pytest.mark.parametrize(
    ("requests", "bound_requests", "reason"),
    [
        ({"nvidia.com/gpu": 8}, [], None),
        ({"nvidia.com/gpu": 9}, [], "Insufficient nvidia.com/gpu"),
        ({"nvidia.com/gpu": 4}, [{"nvidia.com/gpu": 4}], None),
        ({"nvidia.com/gpu": 5}, [{"nvidia.com/gpu": 4}], "Insufficient nvidia.com/gpu"),
        ({MIG: 7}, [], None),
        ({MIG: 2}, [{MIG: 6}], f"Insufficient {MIG}"),
        ({SHARED: 4}, [{SHARED: 12}], None),
        ({SHARED: 5}, [{SHARED: 12}], f"Insufficient {SHARED}"),
        ({"cpu": 64_000}, [], None),
        ({"cpu": 1000}, [{"cpu": 63_500}], "Insufficient cpu"),
        ({"memory": 2**30}, [{"memory": 512 * 2**30}], "Insufficient memory"),
        # a resource the node does not have at all
        ({"example.com/fpga": 1}, [], "Insufficient example.com/fpga"),
        # no cpu/memory request counts as zero for the fit filter
        ({}, [{"cpu": 64_000, "memory": 512 * 2**30}], None),
    ],
)
def test_resource_fit(
    requests: dict[str, int], bound_requests: list[dict[str, int]], reason: str | None
) -> None:
    n = node("n1", extra={MIG: 7, SHARED: 16})
    bound = [pod(f"b{i}", requests=r, on="n1") for i, r in enumerate(bound_requests)]
    assert reason_on(n, pod(requests=requests), bound) == reason


def test_too_many_pods() -> None:
    n = node("n1", pods=2)
    bound = [pod("a", on="n1"), pod("b", on="n1")]
    result = schedule(pod(), [n], bound)
    assert result.node is None
    assert result.reasons == {"Too many pods": 1}


def test_several_insufficient_resources_each_count_the_node() -> None:
    nodes = [node("n1", gpus=2, cpu=4000), node("n2", gpus=2, cpu=64_000)]
    result = schedule(pod(gpus=4, requests={"cpu": 8000}), nodes, [])
    assert result.reasons == {"Insufficient cpu": 1, "Insufficient nvidia.com/gpu": 2}
    # cpu is checked before extended resources, so it is n1's first reason
    assert result.node_reasons == {
        "n1": "Insufficient cpu",
        "n2": "Insufficient nvidia.com/gpu",
    }


def test_pods_on_other_nodes_do_not_use_this_nodes_resources() -> None:
    nodes = [node("n1"), node("n2")]
    bound = [pod("big", gpus=8, on="n2")]
    assert schedule(pod(gpus=8), nodes, bound).node == "n1"


# -- pod anti-affinity -----------------------------------------------------------


def anti(
    labels: dict[str, str], key: str = "kubernetes.io/hostname", **kw: object
) -> PodAffinityTerm:
    return PodAffinityTerm(LabelSelector(tuple(labels.items())), key, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bound_labels", "bound_namespace", "term", "reason"),
    [
        ({"app": "ps"}, "default", anti({"app": "ps"}), ANTI),
        ({"app": "worker"}, "default", anti({"app": "ps"}), None),
        # only pods in the pod's own namespace by default
        ({"app": "ps"}, "team-b", anti({"app": "ps"}), None),
        ({"app": "ps"}, "team-b", anti({"app": "ps"}, namespaces=("team-b",)), ANTI),
        ({"app": "ps"}, "team-b", anti({"app": "ps"}, all_namespaces=True), ANTI),
        # a topology key the node lacks puts the node in no domain
        ({"app": "ps"}, "default", anti({"app": "ps"}, key="rack"), None),
    ],
)
def test_required_anti_affinity(
    bound_labels: dict[str, str], bound_namespace: str, term: PodAffinityTerm, reason: str | None
) -> None:
    n = node("n1")
    bound = [pod("other", on="n1", labels=bound_labels, namespace=bound_namespace)]
    p = pod(required_pod_anti_affinity=(term,))
    assert reason_on(n, p, bound) == reason


def test_anti_affinity_with_zone_topology_blocks_the_whole_zone() -> None:
    nodes = [
        node("a1", labels={"zone": "a"}),
        node("a2", labels={"zone": "a"}),
        node("b1", labels={"zone": "b"}),
    ]
    bound = [pod("ps-0", on="a1", labels={"app": "ps"})]
    p = pod(required_pod_anti_affinity=(anti({"app": "ps"}, key="zone"),))
    result = schedule(p, nodes, bound)
    assert result.node == "b1"
    nodes[2] = node("b1", labels={"zone": "b"}, gpus=0)
    result = schedule(
        pod(gpus=1, required_pod_anti_affinity=p.required_pod_anti_affinity), nodes, bound
    )
    assert result.node_reasons == {"a1": ANTI, "a2": ANTI, "b1": "Insufficient nvidia.com/gpu"}


def test_existing_pods_anti_affinity_keeps_new_pod_away() -> None:
    nodes = [node("n1"), node("n2")]
    bound = [
        pod(
            "loner",
            on="n1",
            required_pod_anti_affinity=(anti({"team": "vision"}),),
        )
    ]
    result = schedule(pod(labels={"team": "vision"}), nodes, bound)
    assert result.node == "n2"
    result = schedule(pod(labels={"team": "vision"}), nodes[:1], bound)
    assert result.node_reasons == {"n1": "node(s) didn't satisfy existing pods anti-affinity rules"}
