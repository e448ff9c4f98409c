"""Plain-language advice for a researcher whose pod is pending (or about to be).

kube-scheduler's message counts nodes per reason; a researcher wants to know
whether to wait, change the request, or ask an administrator. ``explain`` answers
that from the same snapshot the scheduling decision was made on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scheduling.cycle import (
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    ClusterSnapshot,
    ScheduleResult,
)
from scheduling.matching import (
    FILTER_EFFECTS,
    UNSCHEDULABLE_TAINT,
    first_untolerated_taint,
    node_matches_selector_and_affinity,
    tolerates,
)
from scheduling.quantity import human_number, human_quantity
from scheduling.resources import ANY_GPU, GPU_PRODUCT_LABEL
from scheduling.types import Node, Pod, Taint

_NATIVE = ("cpu", "memory", "ephemeral-storage")
_WAIT = "it will start when running jobs finish"


@dataclass(frozen=True)
class Advice:
    """What the portal shows next to a pending pod.

    ``max_free_on_one_node`` and ``max_capacity_on_one_node`` cover the extended
    resources the pod asks for (GPUs, MIG slices, shared GPUs), each maximised
    separately over the nodes the pod may run on.
    """

    text: str
    can_ever_fit: bool
    matching_nodes: int
    max_free_on_one_node: dict[str, int] = field(default_factory=dict)
    max_capacity_on_one_node: dict[str, int] = field(default_factory=dict)
    gpu_products: tuple[str, ...] = ()


def requested_gpu_products(pod: Pod) -> tuple[str, ...]:
    """GPU products the pod is pinned to via nodeSelector or required node affinity."""
    if GPU_PRODUCT_LABEL in pod.node_selector:
        return (pod.node_selector[GPU_PRODUCT_LABEL],)
    products: list[str] = []
    for term in pod.required_node_affinity:
        for req in term.match_expressions:
            if req.key == GPU_PRODUCT_LABEL and req.operator == "In":
                products.extend(v for v in req.values if v not in products)
    return tuple(products)


def _amount(resource: str, qty: int) -> str:
    return human_quantity(qty, resource)


def _asks_for(resource: str, qty: int, products: tuple[str, ...]) -> str:
    if resource == ANY_GPU and products:
        noun = "GPU" if qty == 1 else "GPUs"
        return f"{qty} {' or '.join(products)} {noun}"
    return _amount(resource, qty)


def _taint_text(taint: Taint) -> str:
    return f"{{{taint.key}: {taint.value}}}"


def _ordered_requests(pod: Pod) -> list[tuple[str, int]]:
    """Extended resources first (what a GPU user cares about), then cpu, memory, disk."""
    extended = sorted(
        (name, qty)
        for name, qty in pod.requests.items()
        if qty > 0 and name not in _NATIVE and name != "pods"
    )
    native = [(n, pod.requests[n]) for n in _NATIVE if pod.requests.get(n, 0) > 0]
    return extended + native


def _fits_empty(node: Node, requests: Iterable[tuple[str, int]]) -> bool:
    if node.allocatable.get("pods", 1) < 1:
        return False
    return all(qty <= node.allocatable.get(name, 0) for name, qty in requests)


@dataclass(frozen=True)
class _Candidates:
    selected: list[Node]  # pass nodeSelector/affinity
    matching: list[Node]  # ... and taints
    open: list[Node]  # ... and not cordoned (unless the pod tolerates it)
    blocking_taints: list[Taint]  # what keeps the selected nodes that do not match


def _candidates(pod: Pod, snapshot: ClusterSnapshot) -> _Candidates:
    tolerates_cordon = any(tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations)
    selected: list[Node] = []
    matching: list[Node] = []
    blocking_taints: list[Taint] = []
    for node in snapshot.nodes:
        if not node_matches_selector_and_affinity(pod, node):
            continue
        selected.append(node)
        taint = first_untolerated_taint(node.taints, pod.tolerations, FILTER_EFFECTS)
        if taint is None:
            matching.append(node)
        elif taint not in blocking_taints:
            blocking_taints.append(taint)
    open_nodes = [n for n in matching if tolerates_cordon or not n.unschedulable]
    return _Candidates(selected, matching, open_nodes, blocking_taints)


def explain(
    pod: Pod,
    result: ScheduleResult,
    nodes: Sequence[Node] | ClusterSnapshot,
    bound_pods: Iterable[Pod] = (),
) -> Advice:
    """Explain ``result`` (from ``schedule``) in words a researcher can act on.

    1. The candidate nodes: those the pod's selector and affinity allow, those of them
       whose taints it tolerates, and those of them not cordoned.
    2. Per requested resource, the most any candidate has (capacity) and has free.
    3. The first that applies: it fits, it preempts, no node matches, it can never fit,
       every node is cordoned, or it waits (asking for what, with what is free).
    """
    snapshot = nodes if isinstance(nodes, ClusterSnapshot) else ClusterSnapshot(nodes, bound_pods)
    products = requested_gpu_products(pod)
    requests = _ordered_requests(pod)
    extended = [(n, q) for n, q in requests if n not in _NATIVE]
    found = _candidates(pod, snapshot)
    max_capacity = {
        name: max((n.allocatable.get(name, 0) for n in found.matching), default=0)
        for name, _ in requests
    }
    max_free = {
        name: max((max(snapshot.free(n.name).get(name, 0), 0) for n in found.open), default=0)
        for name, _ in requests
    }
    can_ever_fit = any(_fits_empty(n, requests) for n in found.matching)
    if result.node is not None:
        text = f"fits now: it will be placed on {result.node}"
    elif result.nominated_node is not None:
        names = ", ".join(v.key for v in result.victims)
        count = len(result.victims)
        pods, verb = ("pod", "is") if count == 1 else ("pods", "are")
        text = (
            f"will start on {result.nominated_node} once {count} lower-priority {pods} "
            f"({names}) {verb} preempted"
        )
    elif not found.matching:
        text = _no_match_text(products, snapshot, found)
    elif not can_ever_fit:
        text = _never_fits_text(requests, max_capacity, products)
    elif not found.open:
        text = (
            "every matching node is cordoned (unschedulable); "
            "it will start when an administrator uncordons one"
        )
    else:
        text = _waiting_text(requests, extended, products, max_free, len(found.matching), result)
    return Advice(
        text=text,
        can_ever_fit=can_ever_fit,
        matching_nodes=len(found.matching),
        max_free_on_one_node={n: max_free[n] for n, _ in extended},
        max_capacity_on_one_node={n: max_capacity[n] for n, _ in extended},
        gpu_products=products,
    )


def _no_match_text(products: tuple[str, ...], snapshot: ClusterSnapshot, found: _Candidates) -> str:
    if products and not any(n.labels.get(GPU_PRODUCT_LABEL) in products for n in snapshot.nodes):
        return f"no node matches the GPU product {' or '.join(products)}"
    if not found.selected:
        return "no node matches the pod's node selector/affinity"
    if len(found.blocking_taints) == 1:
        return (
            f"every matching node has the untolerated taint {_taint_text(found.blocking_taints[0])}"
        )
    taints = ", ".join(_taint_text(t) for t in found.blocking_taints)
    return f"every matching node has an untolerated taint: {taints}"


def _never_fits_text(
    requests: list[tuple[str, int]], max_capacity: dict[str, int], products: tuple[str, ...]
) -> str:
    for name, qty in requests:
        if qty > max_capacity[name]:
            where = "no node"
            if name == ANY_GPU and products:
                where = f"no {' or '.join(products)} node"
            largest = "node" if where == "no node" else where.removeprefix("no ")
            return (
                f"can never fit: {where} has {_amount(name, qty)}; "
                f"the largest {largest} has {human_number(max_capacity[name], name, down=True)}"
            )
    wanted = ", ".join(_amount(n, q) for n, q in requests)
    return f"can never fit: no single node has {wanted} at once"


def _waiting_text(
    requests: list[tuple[str, int]],
    extended: list[tuple[str, int]],
    products: tuple[str, ...],
    max_free: dict[str, int],
    matching: int,
    result: ScheduleResult,
) -> str:
    """It could fit but does not now: what it asks for against the most free on one node."""
    if products:
        where = f"nodes with {' or '.join(products)}: {matching}"
    else:
        where = f"matching nodes: {matching}"
    headline = extended or requests
    if headline:
        asks = ", ".join(_asks_for(n, q, products) for n, q in headline)
        free = ", ".join(
            human_number(max_free[n], n, down=True)
            if n == ANY_GPU or len(headline) == 1
            else human_quantity(max_free[n], n, down=True)
            for n, _ in headline
        )
        text = f"asks for {asks} on one node; {where}, free now: {free} at most on one node"
    else:
        text = f"asks for no resources; {where}"
    blocked = result.reasons.get(REASON_ANTI_AFFINITY, 0) + result.reasons.get(
        REASON_EXISTING_ANTI_AFFINITY, 0
    )
    if blocked:
        text += f"; pod anti-affinity rules keep it off {blocked} node(s)"
    return f"{text}; {_WAIT}"
