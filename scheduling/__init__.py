"""Pure-Python kube-scheduler semantics for GPU pods.

No Django, no I/O. The sandbox uses it to place pods; the portal uses it for the
fit preview and to explain why a pod is pending.
"""

from scheduling.advice import Advice, explain, requested_gpu_products
from scheduling.cycle import (
    DEFAULT_SCORED_RESOURCES,
    PLUGIN_WEIGHTS,
    ClusterSnapshot,
    ScheduleResult,
    fit_error_message,
    schedule,
)
from scheduling.from_k8s import node_from_k8s, pod_from_k8s, pod_is_terminal, pod_requests
from scheduling.quantity import (
    cpu_millis,
    format_quantity,
    memory_bytes,
    normalise_quantity,
    normalise_resources,
    parse_quantity,
)
from scheduling.types import (
    LabelSelector,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    PreemptionPolicy,
    PreferredSchedulingTerm,
    Strategy,
    Taint,
    TaintEffect,
    Toleration,
    WeightedPodAffinityTerm,
)

__all__ = [
    "DEFAULT_SCORED_RESOURCES",
    "PLUGIN_WEIGHTS",
    "Advice",
    "ClusterSnapshot",
    "LabelSelector",
    "Node",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Pod",
    "PodAffinityTerm",
    "PreemptionPolicy",
    "PreferredSchedulingTerm",
    "ScheduleResult",
    "Strategy",
    "Taint",
    "TaintEffect",
    "Toleration",
    "WeightedPodAffinityTerm",
    "cpu_millis",
    "explain",
    "fit_error_message",
    "format_quantity",
    "memory_bytes",
    "node_from_k8s",
    "normalise_quantity",
    "normalise_resources",
    "parse_quantity",
    "pod_from_k8s",
    "pod_is_terminal",
    "pod_requests",
    "requested_gpu_products",
    "schedule",
]
