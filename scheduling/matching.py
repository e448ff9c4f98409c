"""Label, selector, affinity and taint matching with Kubernetes' exact rules.

Shared by the scheduling core and the advice module, so "why is my pod pending"
and "where would it run" can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduling.types import (
    LabelSelector,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    Taint,
    Toleration,
)

FILTER_EFFECTS: frozenset[str] = frozenset({"NoSchedule", "NoExecute"})
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


def _parse_int(text: str) -> int | None:
    # Go's strconv.ParseInt: optional sign and decimal digits, nothing else.
    stripped = text[1:] if text[:1] in "+-" else text
    if not stripped.isdigit() or not stripped.isascii():
        return None
    return int(text)


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One ``matchExpressions`` entry against a label set."""
    op = req.operator
    if op == "Exists":
        return req.key in labels
    if op == "DoesNotExist":
        return req.key not in labels
    if op == "NotIn":
        # A missing label satisfies NotIn, as in labels.Requirement.Matches.
        return labels.get(req.key) not in req.values
    value = labels.get(req.key)
    if value is None:
        return False
    if op == "In":
        return value in req.values
    if op in ("Gt", "Lt"):
        if len(req.values) != 1:
            return False
        have, want = _parse_int(value), _parse_int(req.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    """Expressions and fields are ANDed; a term with neither matches nothing."""
    if not term.match_expressions and not term.match_fields:
        return False
    if not all(requirement_matches(r, node.labels) for r in term.match_expressions):
        return False
    fields = {"metadata.name": node.name}
    return all(requirement_matches(r, fields) for r in term.match_fields)


def node_matches_selector_and_affinity(pod: Pod, node: Node) -> bool:
    """``spec.nodeSelector`` AND the ORed required node-affinity terms."""
    labels = node.labels
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return False
    if pod.required_node_affinity:
        return any(node_selector_term_matches(t, node) for t in pod.required_node_affinity)
    return True


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.value == taint.value


def first_untolerated_taint(
    taints: Iterable[Taint], tolerations: Iterable[Toleration], effects: frozenset[str]
) -> Taint | None:
    tols = tuple(tolerations)
    for taint in taints:
        if taint.effect not in effects:
            continue
        if not any(tolerates(t, taint) for t in tols):
            return taint
    return None


# kube-scheduler's TaintToleration filter (1.35) no longer names the taint; the portal's
# advice does (``scheduling.advice``: ``first_untolerated_taint``).
REASON_UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"


def label_selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """An empty selector matches every pod, as ``metav1.LabelSelectorAsSelector`` does."""
    for key, value in selector.match_labels:
        if labels.get(key) != value:
            return False
    return all(requirement_matches(r, labels) for r in selector.match_expressions)


def affinity_term_matches(term: PodAffinityTerm, owner_namespace: str, other: Pod) -> bool:
    """Does ``other`` fall under ``term``, written in a pod living in ``owner_namespace``?"""
    if not term.all_namespaces:
        namespaces = term.namespaces or (owner_namespace,)
        if other.namespace not in namespaces:
            return False
    return label_selector_matches(term.label_selector, other.labels)
