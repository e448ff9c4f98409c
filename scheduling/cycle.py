"""One kube-scheduler scheduling cycle: filter, score, and preempt when nothing fits.

Follows kube-scheduler 1.33 with its default plugin set, restricted to what a GPU
batch cluster uses:

1. Filter nodes with NodeUnschedulable, TaintToleration, NodeAffinity,
   NodeResourcesFit and InterPodAffinity, in that order (the order of
   ``getDefaultPlugins`` in pkg/scheduler/apis/config/v1/default_plugins.go). A node
   reports the reasons of its first failing filter only. Like kube-scheduler, the
   search walks the nodes zone by zone from where the previous cycle stopped and ends
   once ``num_feasible_nodes_to_find`` nodes fit (percentageOfNodesToScore); when none
   fits, every node has been filtered, so the message counts all of them.
2. Score the feasible nodes found (TaintToleration ×3, NodeAffinity ×2,
   InterPodAffinity ×2, NodeResourcesFit ×1) and pick the highest; ties go to the
   smallest node name where kube-scheduler would pick at random, so the sandbox is
   reproducible.
3. If no node passes, run DefaultPreemption's dry run on every node whose failure a
   preemption could cure (resources, pod anti-affinity) and nominate the best one.

Not modelled: PodTopologySpread, BalancedAllocation, ImageLocality, volumes, ports,
required pod affinity, PodDisruptionBudgets, pod start times (used by
kube-scheduler only to break ties between equally important victims).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.matching import (
    FILTER_EFFECTS,
    REASON_UNTOLERATED_TAINT,
    UNSCHEDULABLE_TAINT,
    affinity_term_matches,
    first_untolerated_taint,
    node_matches_selector_and_affinity,
    node_selector_term_matches,
    tolerates,
)
from scheduling.types import Node, Pod, PodAffinityTerm, Strategy

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
PREEMPTION_NO_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_NEVER = "not eligible due to preemptionPolicy=Never."
# The DynamicResources plugin's PostFilter, before preemption's (1.35: DRA on by default), for
# a pod without resource claims.
NO_CLAIMS_TO_DEALLOCATE = "no new claims to deallocate"
POST_FILTER = f" {NO_CLAIMS_TO_DEALLOCATE}, preemption: "
NO_NODES_AVAILABLE = "no nodes available to schedule pods"

DEFAULT_SCORED_RESOURCES: Mapping[str, int] = {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1}
PLUGIN_WEIGHTS: Mapping[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "InterPodAffinity": 2,
    "NodeResourcesFit": 1,
}
MAX_NODE_SCORE = 100
# The kubelet's default --max-pods; only used for hand-built nodes without a
# ``pods`` allocatable (a real Node always reports one).
DEFAULT_MAX_PODS = 110
# kube-scheduler scores a pod without cpu/memory requests as if it asked for these
# (schedutil.DefaultMilliCPURequest / DefaultMemoryRequest) so that such pods still
# spread; the fit filter itself counts them as zero.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
_NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
# Added to each victim priority before summing, as pickOneNodeForPreemption does, so
# that negative priorities cannot make more victims look cheaper.
_PRIORITY_OFFSET = 2**31
# numFeasibleNodesToFind in pkg/scheduler/schedule_one.go: below this many nodes every
# node is filtered; above it the search stops after this many feasible nodes at least.
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
# Static filter results kept per pod shape; a cluster sees few shapes, this bounds a
# snapshot that sees many.
_STATIC_CACHE_SHAPES = 256
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"


def num_feasible_nodes_to_find(num_all_nodes: int, percentage_of_nodes_to_score: int = 0) -> int:
    """How many feasible nodes a cycle looks for before it stops filtering and scores.

    kube-scheduler's rule: every node below 100 nodes; otherwise the configured
    percentage, or with 0 (the default) an adaptive one, 50% minus 1% per 125 nodes
    with a floor of 5%; never fewer than 100 nodes.
    """
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = min(percentage_of_nodes_to_score, 100)
    if percentage <= 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def _zone_key(node: Node) -> tuple[str, str]:
    labels = node.labels
    region = labels.get(REGION_LABEL) or labels.get("failure-domain.beta.kubernetes.io/region", "")
    zone = labels.get(ZONE_LABEL) or labels.get("failure-domain.beta.kubernetes.io/zone", "")
    return region, zone


@dataclass(frozen=True)
class ScheduleResult:
    """The outcome of one scheduling cycle for one pod.

    ``message`` is what kube-scheduler puts in the ``PodScheduled`` condition and
    the ``FailedScheduling`` event; it is empty when the pod fits.
    """

    node: str | None
    nominated_node: str | None = None
    victims: tuple[Pod, ...] = ()
    reasons: dict[str, int] = field(default_factory=dict)
    node_reasons: dict[str, str] = field(default_factory=dict)
    message: str = ""
    scores: dict[str, int] = field(default_factory=dict)
    preemption_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def scheduled(self) -> bool:
        return self.node is not None


def _nonzero_cpu_memory(pod: Pod) -> tuple[int, int]:
    requests = pod.requests
    # Only a missing key gets the default; an explicit 0 stays 0, as in kube-scheduler.
    cpu = requests.get("cpu", DEFAULT_MILLI_CPU_REQUEST)
    memory = requests.get("memory", DEFAULT_MEMORY_REQUEST)
    return cpu, memory


class ClusterSnapshot:
    """Nodes plus bound pods, with each node's requested resources kept up to date.

    Build it once and call ``add_pod``/``remove_pod`` as pods are bound and finish;
    every ``schedule`` call then costs O(nodes) instead of O(nodes + pods).
    Pods are identified by ``namespace/name``. Nodes are immutable: change one with
    ``add_node``, which also drops what the snapshot derived from the old one.

    ``next_start_node_index`` is where the next cycle starts its search in
    ``search_order`` (kube-scheduler's nextStartNodeIndex), so that successive pods do
    not all land on the first nodes found.
    """

    def __init__(self, nodes: Iterable[Node], pods: Iterable[Pod] = ()) -> None:
        self._nodes: dict[str, Node] = {}
        self._sorted: tuple[Node, ...] | None = None
        self._search_order: tuple[Node, ...] | None = None
        self._free_in_order: list[dict[str, int]] | None = None
        # Pod shape (tolerations, selector, affinity) → nodes passing the static filters.
        self._static_passing: dict[Hashable, tuple[int, ...]] = {}
        self.next_start_node_index = 0
        self._pods: dict[str, dict[str, Pod]] = {}
        self._used: dict[str, dict[str, int]] = {}
        # Allocatable minus used per node, ``pods`` included: what the fit filter reads.
        self._free: dict[str, dict[str, int]] = {}
        self._nonzero: dict[str, list[int]] = {}
        self._where: dict[str, str] = {}
        self._with_anti_affinity: dict[str, Pod] = {}
        # Affinity terms default to their own namespace; this index lets them skip
        # the other teams' pods.
        self._by_namespace: dict[str, dict[str, Pod]] = {}
        # (namespace, label key, label value) → pods: affinity terms select by label.
        self._by_label: dict[tuple[str, str, str], dict[str, Pod]] = {}
        for node in nodes:
            self.add_node(node)
        for pod in pods:
            # Pods bound to nodes outside the snapshot (a node being deleted) or not
            # bound at all hold nothing the scheduler can use, so skip them.
            if pod.node_name is not None and pod.node_name in self._nodes:
                self.add_pod(pod)

    # -- nodes -----------------------------------------------------------------
    @property
    def nodes(self) -> tuple[Node, ...]:
        """Nodes sorted by name."""
        if self._sorted is None:
            self._sorted = tuple(self._nodes[name] for name in sorted(self._nodes))
        return self._sorted

    @property
    def search_order(self) -> tuple[Node, ...]:
        """Nodes in the order kube-scheduler's node tree lists them: one node of each
        zone in turn (zones in order of first appearance, nodes by name within a zone)."""
        if self._search_order is None:
            zones: dict[tuple[str, str], list[Node]] = {}
            for node in self.nodes:
                zones.setdefault(_zone_key(node), []).append(node)
            columns = list(zones.values())
            order: list[Node] = []
            for i in range(max((len(c) for c in columns), default=0)):
                order.extend(column[i] for column in columns if i < len(column))
            self._search_order = tuple(order)
        return self._search_order

    @property
    def free_in_search_order(self) -> list[dict[str, int]]:
        """Each node's free resources (kept current by ``add_pod``/``remove_pod``),
        aligned with ``search_order``. Read only."""
        if self._free_in_order is None:
            self._free_in_order = [self._free[node.name] for node in self.search_order]
        return self._free_in_order

    def statically_passing(
        self, shape: Hashable, static_reason: Callable[[Node], str | None]
    ) -> tuple[int, ...]:
        """Positions in ``search_order`` of the nodes a pod of ``shape`` passes the
        static filters on (``_Cycle.static_reason``), computed once per shape."""
        cached = self._static_passing.get(shape)
        if cached is None:
            if len(self._static_passing) >= _STATIC_CACHE_SHAPES:
                self._static_passing.clear()
            cached = tuple(
                i for i, node in enumerate(self.search_order) if static_reason(node) is None
            )
            self._static_passing[shape] = cached
        return cached

    def _nodes_changed(self) -> None:
        self._sorted = None
        self._search_order = None
        self._free_in_order = None
        self._static_passing.clear()

    def node(self, name: str) -> Node:
        return self._nodes[name]

    def __contains__(self, node_name: object) -> bool:
        return node_name in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def add_node(self, node: Node) -> None:
        """Add a node, or replace it (labels, taints, cordon) keeping its pods."""
        self._nodes[node.name] = node
        self._nodes_changed()
        self._pods.setdefault(node.name, {})
        used = self._used.setdefault(node.name, {})
        self._nonzero.setdefault(node.name, [0, 0])
        free = {name: qty - used.get(name, 0) for name, qty in node.allocatable.items()}
        free["pods"] = node.allocatable.get("pods", DEFAULT_MAX_PODS) - len(self._pods[node.name])
        self._free[node.name] = free

    def remove_node(self, name: str) -> list[Pod]:
        """Remove a node; returns the pods that were bound to it."""
        pods = list(self._pods.get(name, {}).values())
        for pod in pods:
            self.remove_pod(pod)
        self._nodes.pop(name, None)
        self._pods.pop(name, None)
        self._used.pop(name, None)
        self._free.pop(name, None)
        self._nonzero.pop(name, None)
        self._nodes_changed()
        return pods

    # -- pods ------------------------------------------------------------------
    @property
    def pods(self) -> Iterator[Pod]:
        for node_pods in self._pods.values():
            yield from node_pods.values()

    def pods_in(self, namespaces: Iterable[str] | None) -> Iterator[Pod]:
        """Bound pods in ``namespaces`` (every pod when None)."""
        if namespaces is None:
            yield from self.pods
            return
        for namespace in dict.fromkeys(namespaces):
            yield from self._by_namespace.get(namespace, {}).values()

    def pods_labelled(self, namespaces: Iterable[str], key: str, value: str) -> Iterator[Pod]:
        """Bound pods in ``namespaces`` with the label ``key=value``."""
        for namespace in dict.fromkeys(namespaces):
            yield from self._by_label.get((namespace, key, value), {}).values()

    def pods_on(self, node_name: str) -> list[Pod]:
        """Pods bound to ``node_name`` in the order they were added."""
        return list(self._pods.get(node_name, {}).values())

    def pod_count(self, node_name: str) -> int:
        return len(self._pods[node_name])

    def used(self, node_name: str) -> Mapping[str, int]:
        """Sum of the requests of the pods bound to ``node_name``."""
        return self._used[node_name]

    def free(self, node_name: str) -> dict[str, int]:
        """Allocatable minus requested, per resource the node has (``pods`` included)."""
        return dict(self._free[node_name])

    def nonzero_used(self, node_name: str) -> tuple[int, int]:
        cpu, memory = self._nonzero[node_name]
        return cpu, memory

    def add_pod(self, pod: Pod, node_name: str | None = None) -> Pod:
        """Bind ``pod`` (to ``node_name`` if given); returns the bound pod.

        A pod already in the snapshot under the same ``namespace/name`` is replaced.
        """
        if node_name is not None and pod.node_name != node_name:
            pod = dataclasses.replace(pod, node_name=node_name)
        if pod.node_name is None or pod.node_name not in self._nodes:
            raise KeyError(f"pod {pod.key} is not bound to a node of this snapshot")
        key = pod.key
        if key in self._where:
            self.remove_pod(key)
        target = pod.node_name
        self._pods[target][key] = pod
        self._where[key] = target
        used = self._used[target]
        free = self._free[target]
        requests = pod.requests
        for name, qty in requests.items():
            used[name] = used.get(name, 0) + qty
            if name in free and name != "pods":
                free[name] -= qty
        free["pods"] -= 1
        nonzero = self._nonzero[target]
        nonzero[0] += requests.get("cpu", DEFAULT_MILLI_CPU_REQUEST)
        nonzero[1] += requests.get("memory", DEFAULT_MEMORY_REQUEST)
        self._by_namespace.setdefault(pod.namespace, {})[key] = pod
        for label in pod.labels.items():
            self._by_label.setdefault((pod.namespace, *label), {})[key] = pod
        if pod.required_pod_anti_affinity:
            self._with_anti_affinity[key] = pod
        return pod

    def remove_pod(self, pod: Pod | str) -> Pod | None:
        """Unbind a pod (by object or ``namespace/name``); returns it, or None if unknown."""
        key = pod if isinstance(pod, str) else pod.key
        node_name = self._where.pop(key, None)
        if node_name is None:
            return None
        removed = self._pods[node_name].pop(key)
        used = self._used[node_name]
        free = self._free[node_name]
        for name, qty in removed.requests.items():
            left = used.get(name, 0) - qty
            if left:
                used[name] = left
            else:
                used.pop(name, None)
            if name in free and name != "pods":
                free[name] += qty
        free["pods"] += 1
        cpu, memory = _nonzero_cpu_memory(removed)
        nonzero = self._nonzero[node_name]
        nonzero[0] -= cpu
        nonzero[1] -= memory
        self._with_anti_affinity.pop(key, None)
        in_namespace = self._by_namespace[removed.namespace]
        del in_namespace[key]
        if not in_namespace:
            del self._by_namespace[removed.namespace]
        for label in removed.labels.items():
            index = (removed.namespace, *label)
            labelled = self._by_label[index]
            del labelled[key]
            if not labelled:
                del self._by_label[index]
        return removed

    def node_of(self, pod_key: str) -> str | None:
        return self._where.get(pod_key)

    def pods_with_required_anti_affinity(self) -> Iterable[Pod]:
        return self._with_anti_affinity.values()


def fit_error_message(num_nodes: int, reasons: Mapping[str, int]) -> str:
    """``0/<N> nodes are available: <count> <reason>, ….`` sorted as plain strings."""
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items() if count)
    return f"0/{num_nodes} nodes are available: {', '.join(parts)}."


@dataclass
class _Candidate:
    node: str
    victims: list[Pod]
    rank: tuple[int, int, int, str] = (0, 0, 0, "")

    def __post_init__(self) -> None:
        # pickOneNodeForPreemption, minus PDBs and start times.
        highest = max(v.priority for v in self.victims)
        total = sum(v.priority + _PRIORITY_OFFSET for v in self.victims)
        self.rank = (highest, total, len(self.victims), self.node)


class _Cycle:
    """Per-pod state computed once, then used for every node (kube-scheduler's PreFilter)."""

    def __init__(
        self,
        pod: Pod,
        snapshot: ClusterSnapshot,
        strategy: Strategy,
        scored_resources: Mapping[str, int],
    ) -> None:
        self.pod = pod
        self.snapshot = snapshot
        self.strategy = strategy
        self.tolerations = pod.tolerations
        self.tolerates_unschedulable = any(
            tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations
        )
        # NodeResourcesFit checks cpu, memory, ephemeral-storage, then the rest; the
        # order decides which reason a node reports first in ``node_reasons``.
        ordered: list[tuple[str, int]] = []
        for name in ("cpu", "memory", "ephemeral-storage"):
            if pod.requests.get(name, 0) > 0:
                ordered.append((name, pod.requests[name]))
        for name in sorted(pod.requests):
            if name not in _NATIVE_RESOURCES and name != "pods" and pod.requests[name] > 0:
                ordered.append((name, pod.requests[name]))
        self.requests: tuple[tuple[str, int], ...] = tuple(ordered)
        # The fast fit check tries the scarce extended resources (GPUs) first.
        self.fit_order = tuple(sorted(ordered, key=lambda r: r[0] in _NATIVE_RESOURCES))
        self.nonzero_cpu, self.nonzero_memory = _nonzero_cpu_memory(pod)
        self.score_plan = self._score_plan(scored_resources)
        self.anti_counts = self._count_anti_affinity_matches()
        self.existing_counts = self._count_existing_anti_affinity()
        self.has_anti_affinity_load = bool(
            any(per_value for _, per_value in self.anti_counts) or self.existing_counts
        )
        # Everything ``static_reason`` reads from the pod: pods of the same shape share
        # the snapshot's cached results.
        self.static_shape = (
            pod.tolerations,
            tuple(sorted(pod.node_selector.items())),
            pod.required_node_affinity,
        )

    # -- PreFilter -------------------------------------------------------------
    def _topology_value(self, pod: Pod, key: str) -> str | None:
        assert pod.node_name is not None
        return self.snapshot.node(pod.node_name).labels.get(key)

    def _term_namespaces(self, term: PodAffinityTerm) -> Iterable[str] | None:
        if term.all_namespaces:
            return None
        return term.namespaces or (self.pod.namespace,)

    def _count_matches(self, term: PodAffinityTerm) -> dict[str, int]:
        """Bound pods matching ``term`` (of the incoming pod), per topology value."""
        per_value: dict[str, int] = {}
        key = term.topology_key
        namespaces = self._term_namespaces(term)
        candidates: Iterable[Pod]
        if namespaces is not None and term.label_selector.match_labels:
            # Only pods carrying the selector's first label can match it.
            label_key, label_value = term.label_selector.match_labels[0]
            candidates = self.snapshot.pods_labelled(namespaces, label_key, label_value)
        else:
            candidates = self.snapshot.pods_in(namespaces)
        for other in candidates:
            if affinity_term_matches(term, self.pod.namespace, other):
                value = self._topology_value(other, key)
                if value is not None:
                    per_value[value] = per_value.get(value, 0) + 1
        return per_value

    def _count_anti_affinity_matches(self) -> list[tuple[str, dict[str, int]]]:
        """Per required anti-affinity term: matching bound pods per topology value."""
        return [
            (t.topology_key, self._count_matches(t)) for t in self.pod.required_pod_anti_affinity
        ]

    def _count_existing_anti_affinity(self) -> dict[str, dict[str, int]]:
        """Topology domains that bound pods' required anti-affinity keeps this pod out of."""
        counts: dict[str, dict[str, int]] = {}
        for other in self.snapshot.pods_with_required_anti_affinity():
            for term in other.required_pod_anti_affinity:
                if affinity_term_matches(term, other.namespace, self.pod):
                    value = self._topology_value(other, term.topology_key)
                    if value is not None:
                        per_value = counts.setdefault(term.topology_key, {})
                        per_value[value] = per_value.get(value, 0) + 1
        return counts

    def _anti_affinity_load(self, node: Node) -> tuple[int, int]:
        labels = node.labels
        anti = 0
        for key, per_value in self.anti_counts:
            value = labels.get(key)
            if value is not None:
                anti += per_value.get(value, 0)
        existing = 0
        for key, per_value in self.existing_counts.items():
            value = labels.get(key)
            if value is not None:
                existing += per_value.get(value, 0)
        return anti, existing

    def _victim_anti_affinity_load(self, victim: Pod, node: Node) -> tuple[int, int]:
        """How much removing ``victim`` from ``node`` lowers the two anti-affinity loads."""
        labels = node.labels
        anti = sum(
            1
            for term in self.pod.required_pod_anti_affinity
            if term.topology_key in labels
            and affinity_term_matches(term, self.pod.namespace, victim)
        )
        existing = sum(
            1
            for term in victim.required_pod_anti_affinity
            if term.topology_key in labels
            and affinity_term_matches(term, victim.namespace, self.pod)
        )
        return anti, existing

    # -- Filter ----------------------------------------------------------------
    def static_reason(self, node: Node) -> str | None:
        """Failures no preemption can cure (UnschedulableAndUnresolvable)."""
        if node.unschedulable and not self.tolerates_unschedulable:
            return REASON_UNSCHEDULABLE
        if node.taints:
            taint = first_untolerated_taint(node.taints, self.tolerations, FILTER_EFFECTS)
            if taint is not None:
                return REASON_UNTOLERATED_TAINT
        if not node_matches_selector_and_affinity(self.pod, node):
            return REASON_NODE_AFFINITY
        return None

    def _free(self, node: Node) -> list[int]:
        """Allocatable minus requested, for each resource the pod asks for (same order)."""
        allocatable = node.allocatable
        used = self.snapshot.used(node.name)
        return [allocatable.get(name, 0) - used.get(name, 0) for name, _ in self.requests]

    def dynamic_reasons(
        self, free: Sequence[int], spare_pods: int, anti: int, existing: int
    ) -> list[str]:
        """NodeResourcesFit then InterPodAffinity; these depend on which pods are bound."""
        reasons: list[str] = []
        if spare_pods < 1:
            reasons.append(REASON_TOO_MANY_PODS)
        for (name, qty), left in zip(self.requests, free, strict=True):
            if qty > left:
                reasons.append(f"Insufficient {name}")
        if reasons:
            return reasons
        if anti > 0:
            return [REASON_ANTI_AFFINITY]
        if existing > 0:
            return [REASON_EXISTING_ANTI_AFFINITY]
        return reasons

    def _spare_pods(self, node: Node, pod_count: int) -> int:
        return node.allocatable.get("pods", DEFAULT_MAX_PODS) - pod_count

    def find_feasible(self, percentage_of_nodes_to_score: int) -> list[Node]:
        """findNodesThatPassFilters: walk ``search_order`` from the snapshot's
        ``next_start_node_index`` until enough nodes fit; move the start past the nodes
        this cycle looked at."""
        snapshot = self.snapshot
        order = snapshot.search_order
        num_nodes = len(order)
        to_find = num_feasible_nodes_to_find(num_nodes, percentage_of_nodes_to_score)
        start = snapshot.next_start_node_index % num_nodes
        # Nodes failing a static filter are looked at but never fit; skip them.
        passing = snapshot.statically_passing(self.static_shape, self.static_reason)
        first = bisect_left(passing, start)
        feasible: list[Node] = []
        processed = num_nodes
        # ``fits`` inlined: this loop runs for thousands of nodes per pod.
        free_at = snapshot.free_in_search_order
        fit_order = self.fit_order
        check_anti_affinity = self.has_anti_affinity_load
        for index in passing[first:] + passing[:first]:
            free = free_at[index]
            if free["pods"] < 1:
                continue
            for resource, qty in fit_order:
                if qty > free.get(resource, 0):
                    break
            else:
                node = order[index]
                if check_anti_affinity and self._anti_affinity_load(node) != (0, 0):
                    continue
                feasible.append(node)
                if len(feasible) == to_find:
                    processed = (index - start) % num_nodes + 1
                    break
        snapshot.next_start_node_index = (start + processed) % num_nodes
        return feasible

    def filter(self, node: Node) -> tuple[list[str], bool]:
        """The node's failure reasons (empty if it fits) and whether preemption may help."""
        reason = self.static_reason(node)
        if reason is not None:
            return [reason], False
        anti, existing = self._anti_affinity_load(node)
        spare = self._spare_pods(node, self.snapshot.pod_count(node.name))
        return self.dynamic_reasons(self._free(node), spare, anti, existing), True

    # -- Score -----------------------------------------------------------------
    def _score_plan(
        self, scored_resources: Mapping[str, int]
    ) -> tuple[tuple[str, int, int, int], ...]:
        """Per scored resource: (name, weight, what the pod adds, where the node's use
        is read: 0/1 the non-zero cpu/memory sums, -1 the plain requests)."""
        plan = []
        for name, weight in scored_resources.items():
            if name == "cpu":
                plan.append((name, weight, self.nonzero_cpu, 0))
            elif name == "memory":
                plan.append((name, weight, self.nonzero_memory, 1))
            else:
                asked = self.pod.requests.get(name, 0)
                # An extended resource the pod does not ask for is left out, so a
                # CPU-only pod is not steered by how busy a node's GPUs are.
                if asked == 0 and name not in _NATIVE_RESOURCES:
                    continue
                plan.append((name, weight, asked, -1))
        return tuple(plan)

    def _fit_score(self, node: Node) -> int:
        allocatable = node.allocatable
        used = self.snapshot._used[node.name]
        nonzero = self.snapshot._nonzero[node.name]
        least_allocated = self.strategy == "LeastAllocated"
        total = weights = 0
        for name, weight, asked, slot in self.score_plan:
            capacity = allocatable.get(name, 0)
            if capacity <= 0:
                continue
            requested = (nonzero[slot] if slot >= 0 else used.get(name, 0)) + asked
            if least_allocated:
                score = 0 if requested > capacity else (capacity - requested) * 100 // capacity
            else:
                score = min(requested, capacity) * 100 // capacity
            total += score * weight
            weights += weight
        return total // weights if weights else 0

    def _node_affinity_scores(self, nodes: Sequence[Node]) -> list[int]:
        terms = self.pod.preferred_node_affinity
        if not terms:
            return [0] * len(nodes)
        raw = [
            sum(t.weight for t in terms if node_selector_term_matches(t.preference, node))
            for node in nodes
        ]
        best = max(raw)
        return [r * MAX_NODE_SCORE // best if best > 0 else 0 for r in raw]

    def _taint_scores(self, nodes: Sequence[Node]) -> list[int]:
        prefer_tolerations = tuple(
            t for t in self.pod.tolerations if t.effect in ("", "PreferNoSchedule")
        )
        raw = [
            sum(
                1
                for taint in node.taints
                if taint.effect == "PreferNoSchedule"
                and not any(tolerates(t, taint) for t in prefer_tolerations)
            )
            if node.taints
            else 0
            for node in nodes
        ]
        worst = max(raw, default=0)
        if worst == 0:
            return [MAX_NODE_SCORE] * len(nodes)
        return [MAX_NODE_SCORE - r * MAX_NODE_SCORE // worst for r in raw]

    def _inter_pod_scores(self, nodes: Sequence[Node]) -> list[int]:
        terms = self.pod.preferred_pod_anti_affinity
        if not terms:
            return [0] * len(nodes)
        penalties = [(w.term.topology_key, w.weight, self._count_matches(w.term)) for w in terms]
        raw = []
        for node in nodes:
            score = 0
            for key, weight, per_value in penalties:
                value = node.labels.get(key)
                if value is not None:
                    score -= weight * per_value.get(value, 0)
            raw.append(score)
        low, high = min(raw), max(raw)
        if high == low:
            return [0] * len(nodes)
        return [int(MAX_NODE_SCORE * ((r - low) / (high - low))) for r in raw]

    def score(self, nodes: Sequence[Node]) -> dict[str, int]:
        fit = [self._fit_score(n) for n in nodes]
        affinity = self._node_affinity_scores(nodes)
        taints = self._taint_scores(nodes)
        inter_pod = self._inter_pod_scores(nodes)
        w = PLUGIN_WEIGHTS
        return {
            node.name: w["NodeResourcesFit"] * fit[i]
            + w["NodeAffinity"] * affinity[i]
            + w["TaintToleration"] * taints[i]
            + w["InterPodAffinity"] * inter_pod[i]
            for i, node in enumerate(nodes)
        }

    # -- PostFilter (DefaultPreemption) ----------------------------------------
    def select_victims(self, node: Node) -> tuple[list[Pod] | None, list[str]]:
        """SelectVictimsOnNode: the fewest, least important pods whose removal makes room.

        1. Remove every lower-priority pod; if the pod still does not fit, the node
           reports that filter's reasons.
        2. Re-add them from the most important down ("reprieve"), keeping each one
           whose return still leaves room; the rest are the victims.
        """
        pod_priority = self.pod.priority
        potential = [p for p in self.snapshot.pods_on(node.name) if p.priority < pod_priority]
        if not potential:
            return None, [PREEMPTION_NO_VICTIMS]
        names = [name for name, _ in self.requests]
        # Each victim's requests for the resources the pod asks for, plus its share of
        # the anti-affinity loads; computed once, then only added and subtracted.
        held = [[v.requests.get(name, 0) for name in names] for v in potential]
        if self.pod.required_pod_anti_affinity or self.existing_counts:
            loads = [self._victim_anti_affinity_load(v, node) for v in potential]
        else:
            loads = [(0, 0)] * len(potential)
        free = self._free(node)
        spare = self._spare_pods(node, self.snapshot.pod_count(node.name)) + len(potential)
        anti, existing = self._anti_affinity_load(node)
        for amounts, (v_anti, v_existing) in zip(held, loads, strict=True):
            for i, qty in enumerate(amounts):
                free[i] += qty
            anti -= v_anti
            existing -= v_existing
        reasons = self.dynamic_reasons(free, spare, anti, existing)
        if reasons:
            return None, reasons
        wanted = [qty for _, qty in self.requests]
        # Stable sort keeps bind order among equal priorities; kube-scheduler would
        # use start time there, which the snapshot does not carry.
        order = sorted(range(len(potential)), key=lambda i: -potential[i].priority)
        victims: list[Pod] = []
        for i in order:
            amounts = held[i]
            v_anti, v_existing = loads[i]
            fits_with_it = (
                spare >= 2
                and anti + v_anti == 0
                and existing + v_existing == 0
                and all(
                    want <= left - qty
                    for want, left, qty in zip(wanted, free, amounts, strict=True)
                )
            )
            if fits_with_it:
                for j, qty in enumerate(amounts):
                    free[j] -= qty
                spare -= 1
                anti += v_anti
                existing += v_existing
            else:
                victims.append(potential[i])
        return victims, []

    def preempt(
        self, resolvable: Sequence[Node], not_helpful: int
    ) -> tuple[_Candidate | None, dict[str, int]]:
        reasons: Counter[str] = Counter()
        if not_helpful:
            reasons[PREEMPTION_NOT_HELPFUL] = not_helpful
        best: _Candidate | None = None
        for node in resolvable:
            victims, failure = self.select_victims(node)
            if victims is None:
                reasons.update(failure)
                continue
            candidate = _Candidate(node.name, victims)
            if best is None or candidate.rank < best.rank:
                best = candidate
        return best, dict(reasons)


def schedule(
    pod: Pod,
    nodes: Sequence[Node] | ClusterSnapshot,
    bound_pods: Iterable[Pod] = (),
    *,
    strategy: Strategy = "MostAllocated",
    scored_resources: Mapping[str, int] | None = None,
    percentage_of_nodes_to_score: int = 0,
) -> ScheduleResult:
    """Run one scheduling cycle for ``pod``.

    ``nodes`` is either a list of nodes (then ``bound_pods`` are the pods already
    placed) or a ``ClusterSnapshot`` (then ``bound_pods`` must be empty). The
    snapshot's pods are not changed: binding the pod or deleting victims is the
    caller's job; only its ``next_start_node_index`` moves on.

    ``percentage_of_nodes_to_score`` is kube-scheduler's setting: 0 (its default) for
    the adaptive share, 100 to score every feasible node.
    """
    if isinstance(nodes, ClusterSnapshot):
        if tuple(bound_pods):
            raise ValueError("pass bound pods inside the ClusterSnapshot, not alongside it")
        snapshot = nodes
    else:
        snapshot = ClusterSnapshot(nodes, bound_pods)
    all_nodes = snapshot.nodes
    if not all_nodes:
        return ScheduleResult(node=None, message=NO_NODES_AVAILABLE)

    cycle = _Cycle(
        pod,
        snapshot,
        strategy,
        DEFAULT_SCORED_RESOURCES if scored_resources is None else scored_resources,
    )
    feasible = cycle.find_feasible(percentage_of_nodes_to_score)
    if feasible:
        scores = cycle.score(feasible)
        best = min(feasible, key=lambda n: (-scores[n.name], n.name))
        return ScheduleResult(node=best.name, scores=scores)

    # Nothing fits, so every node was filtered: filter them again, by name, for the
    # reasons each one gives (the fast path above does not collect them).
    resolvable: list[Node] = []
    reasons: Counter[str] = Counter()
    node_reasons: dict[str, str] = {}
    for node in all_nodes:
        node_failures, preemption_may_help = cycle.filter(node)
        node_reasons[node.name] = node_failures[0]
        reasons.update(node_failures)
        if preemption_may_help:
            resolvable.append(node)

    message = fit_error_message(len(all_nodes), reasons)
    if pod.preemption_policy == "Never":
        return ScheduleResult(
            node=None,
            reasons=dict(reasons),
            node_reasons=node_reasons,
            message=f"{message}{POST_FILTER}{PREEMPTION_NEVER}",
        )
    candidate, preemption_reasons = cycle.preempt(resolvable, len(all_nodes) - len(resolvable))
    if candidate is None:
        message += POST_FILTER + fit_error_message(len(all_nodes), preemption_reasons)
        return ScheduleResult(
            node=None,
            reasons=dict(reasons),
            node_reasons=node_reasons,
            message=message,
            preemption_reasons=preemption_reasons,
        )
    return ScheduleResult(
        node=None,
        nominated_node=candidate.node,
        victims=tuple(candidate.victims),
        reasons=dict(reasons),
        node_reasons=node_reasons,
        message=message,
        preemption_reasons=preemption_reasons,
    )
