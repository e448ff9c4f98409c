"""The snapshot types the scheduling core works on.

Quantities are normalised integers: ``cpu`` in millicores, ``memory`` and
``ephemeral-storage`` in bytes, ``pods`` and extended resources
(``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-1g.10gb`` …)
as whole counts. ``from_k8s.py`` turns Kubernetes JSON objects into these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
Strategy = Literal["LeastAllocated", "MostAllocated"]


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""  # "" tolerates every effect


@dataclass(frozen=True)
class NodeSelectorRequirement:
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSelectorTerm:
    """Expressions are ANDed; the terms of a required affinity are ORed."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    # Only ``metadata.name`` with In/NotIn exists in Kubernetes; ANDed with the expressions.
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True)
class PreferredSchedulingTerm:
    weight: int
    preference: NodeSelectorTerm


@dataclass(frozen=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()  # In/NotIn/Exists/DoesNotExist


@dataclass(frozen=True)
class PodAffinityTerm:
    label_selector: LabelSelector
    topology_key: str = "kubernetes.io/hostname"
    # Empty means "the namespace of the pod that owns the term", as in Kubernetes.
    namespaces: tuple[str, ...] = ()
    # ``namespaceSelector: {}`` selects every namespace; label-based namespace
    # selectors need Namespace objects and are not modelled.
    all_namespaces: bool = False


@dataclass(frozen=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: dict[str, int] = field(default_factory=dict)
    unschedulable: bool = False


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str = "default"
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    priority: int = 0
    preemption_policy: PreemptionPolicy = "PreemptLowerPriority"
    node_selector: dict[str, str] = field(default_factory=dict)
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()  # ORed; empty = none
    preferred_node_affinity: tuple[PreferredSchedulingTerm, ...] = ()
    required_pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    node_name: str | None = None  # set for bound pods

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
