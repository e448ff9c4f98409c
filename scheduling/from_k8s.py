"""Kubernetes JSON (camelCase dicts as the API server returns them) → snapshot types.

Pure functions over plain dicts, so they work on ``ApiClient.sanitize_for_serialization``
output, on ``kubectl get -o json`` and on the sandbox's objects alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from scheduling.quantity import normalise_resources
from scheduling.types import (
    LabelSelector,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    PreemptionPolicy,
    PreferredSchedulingTerm,
    Taint,
    TaintEffect,
    Toleration,
    WeightedPodAffinityTerm,
)

JSON = Mapping[str, Any]
# PriorityClass name → (value, preemptionPolicy), as read from scheduling.k8s.io/v1.
PriorityClasses = Mapping[str, tuple[int, str]]

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _dict(value: Any) -> JSON:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _labels(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(value).items()}


def node_from_k8s(obj: JSON) -> Node:
    """A ``v1.Node`` as the scheduler sees it: labels, taints, allocatable, cordon."""
    metadata, spec = _dict(obj.get("metadata")), _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    # Allocatable is what the scheduler fits against; capacity only as a fallback for
    # hand-written objects (a kubelet always reports both).
    allocatable = _dict(status.get("allocatable")) or _dict(status.get("capacity"))
    taints = tuple(
        Taint(
            key=str(t.get("key", "")),
            value=str(t.get("value", "") or ""),
            effect=cast(TaintEffect, t.get("effect", "NoSchedule")),
        )
        for t in map(_dict, _list(spec.get("taints")))
    )
    return Node(
        name=str(metadata.get("name", "")),
        labels=_labels(metadata.get("labels")),
        taints=taints,
        allocatable=normalise_resources(allocatable),
        unschedulable=bool(spec.get("unschedulable", False)),
    )


def pod_is_terminal(obj: JSON) -> bool:
    """Succeeded/Failed pods hold no resources; kube-scheduler's informer drops them."""
    return _dict(obj.get("status")).get("phase") in _TERMINAL_PHASES


def _container_requests(container: JSON) -> dict[str, int]:
    resources = _dict(container.get("resources"))
    # The API server defaults each missing request from its limit.
    merged = {**_dict(resources.get("limits")), **_dict(resources.get("requests"))}
    return normalise_resources(merged)


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, qty in other.items():
        into[name] = into.get(name, 0) + qty


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, qty in other.items():
        if qty > into.get(name, 0):
            into[name] = qty


def pod_requests(spec: JSON) -> dict[str, int]:
    """The effective request the scheduler uses (``resource.PodRequests``).

    1. Sum the app containers.
    2. Walk the init containers in order: a sidecar (``restartPolicy: Always``) keeps
       running, so it adds to the sum and to every later init container; a plain init
       container needs its own request plus the sidecars started before it.
    3. Take the per-resource max of (1+sidecars) and the largest init step, then add
       ``spec.overhead`` (RuntimeClass overhead).
    """
    total: dict[str, int] = {}
    for container in map(_dict, _list(spec.get("containers"))):
        _add(total, _container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in map(_dict, _list(spec.get("initContainers"))):
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            step = dict(sidecars)
        else:
            step = dict(requests)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(total, init_peak)
    _add(total, normalise_resources(_dict(spec.get("overhead"))))
    return {name: qty for name, qty in total.items() if qty}


def _requirements(items: Any) -> tuple[NodeSelectorRequirement, ...]:
    return tuple(
        NodeSelectorRequirement(
            key=str(r.get("key", "")),
            operator=r.get("operator", "In"),
            values=tuple(str(v) for v in _list(r.get("values"))),
        )
        for r in map(_dict, _list(items))
    )


def _node_selector_term(obj: JSON) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        match_expressions=_requirements(obj.get("matchExpressions")),
        match_fields=_requirements(obj.get("matchFields")),
    )


def _label_selector(obj: JSON) -> LabelSelector:
    return LabelSelector(
        match_labels=tuple(sorted(_labels(obj.get("matchLabels")).items())),
        match_expressions=_requirements(obj.get("matchExpressions")),
    )


def _pod_affinity_term(obj: JSON) -> PodAffinityTerm | None:
    # A term without a labelSelector selects no pods, so it can never block or steer
    # anything; dropping it is exact.
    if obj.get("labelSelector") is None:
        return None
    namespace_selector = obj.get("namespaceSelector")
    return PodAffinityTerm(
        label_selector=_label_selector(_dict(obj.get("labelSelector"))),
        topology_key=str(obj.get("topologyKey", "kubernetes.io/hostname")),
        namespaces=tuple(str(n) for n in _list(obj.get("namespaces"))),
        all_namespaces=isinstance(namespace_selector, Mapping) and not namespace_selector,
    )


def _pod_affinity_terms(items: Any) -> tuple[PodAffinityTerm, ...]:
    terms = (_pod_affinity_term(_dict(t)) for t in _list(items))
    return tuple(t for t in terms if t is not None)


def _weighted_terms(items: Any) -> tuple[WeightedPodAffinityTerm, ...]:
    result = []
    for item in map(_dict, _list(items)):
        term = _pod_affinity_term(_dict(item.get("podAffinityTerm")))
        if term is not None:
            result.append(WeightedPodAffinityTerm(weight=int(item.get("weight", 0)), term=term))
    return tuple(result)


def _tolerations(items: Iterable[Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=str(t.get("key", "") or ""),
            operator="Exists" if t.get("operator") == "Exists" else "Equal",
            value=str(t.get("value", "") or ""),
            effect=str(t.get("effect", "") or ""),
        )
        for t in map(_dict, items)
    )


def pod_from_k8s(obj: JSON, priority_classes: PriorityClasses | None = None) -> Pod:
    """A ``v1.Pod`` as the scheduler sees it.

    ``spec.priority`` wins (the admission plugin has already resolved it on a real
    cluster); otherwise ``priorityClassName`` is looked up in ``priority_classes``,
    which is how the portal previews a pod it has not created yet.
    """
    metadata, spec = _dict(obj.get("metadata")), _dict(obj.get("spec"))
    klass = (priority_classes or {}).get(str(spec.get("priorityClassName", "")))
    priority = spec.get("priority")
    if priority is None:
        priority = klass[0] if klass is not None else 0
    policy = spec.get("preemptionPolicy") or (klass[1] if klass is not None else None)
    preemption_policy = cast(PreemptionPolicy, policy or "PreemptLowerPriority")

    affinity = _dict(spec.get("affinity"))
    node_affinity = _dict(affinity.get("nodeAffinity"))
    required = _dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    anti = _dict(affinity.get("podAntiAffinity"))
    node_name = spec.get("nodeName")
    return Pod(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "default") or "default"),
        uid=str(metadata.get("uid", "") or ""),
        labels=_labels(metadata.get("labels")),
        requests=pod_requests(spec),
        priority=int(priority),
        preemption_policy=preemption_policy,
        node_selector=_labels(spec.get("nodeSelector")),
        required_node_affinity=tuple(
            _node_selector_term(_dict(t)) for t in _list(required.get("nodeSelectorTerms"))
        ),
        preferred_node_affinity=tuple(
            PreferredSchedulingTerm(
                weight=int(p.get("weight", 0)),
                preference=_node_selector_term(_dict(p.get("preference"))),
            )
            for p in map(
                _dict, _list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
            )
        ),
        required_pod_anti_affinity=_pod_affinity_terms(
            anti.get("requiredDuringSchedulingIgnoredDuringExecution")
        ),
        preferred_pod_anti_affinity=_weighted_terms(
            anti.get("preferredDuringSchedulingIgnoredDuringExecution")
        ),
        tolerations=_tolerations(_list(spec.get("tolerations"))),
        node_name=str(node_name) if node_name else None,
    )
