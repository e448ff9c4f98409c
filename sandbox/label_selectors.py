"""Label and field selectors as the API server parses them from query strings."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sandbox.errors import bad_request

Requirement = tuple[str, str, tuple[str, ...]]  # key, operator, values
_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b`` → two terms)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str) -> list[Requirement]:
    reqs: list[Requirement] = []
    for term in _split_top(text or ""):
        m = re.fullmatch(rf"({_KEY})\s+(in|notin)\s+\((.*)\)", term)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append((m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(rf"({_KEY})\s*(==|!=|=)\s*([-A-Za-z0-9_.]*)", term)
        if m:
            op = "!=" if m.group(2) == "!=" else "="
            reqs.append((m.group(1), op, (m.group(3),)))
            continue
        m = re.fullmatch(rf"(!?)\s*({_KEY})", term)
        if m:
            reqs.append((m.group(2), "!" if m.group(1) else "exists", ()))
            continue
        raise bad_request(f"unable to parse requirement: {term}")
    return reqs


def labels_match(reqs: list[Requirement], labels: dict[str, str]) -> bool:
    for key, op, values in reqs:
        present = key in labels
        value = labels.get(key)
        if op == "=" and value != values[0]:
            return False
        if op == "!=" and value == values[0]:
            return False
        if op == "in" and (not present or value not in values):
            return False
        if op == "notin" and present and value in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!" and present:
            return False
    return True


def match_label_selector_obj(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A ``metav1.LabelSelector`` object (Deployment/Job ``spec.selector``)."""
    if not selector:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}[
            expr["operator"]
        ]
        if not labels_match([(expr["key"], op, tuple(expr.get("values") or ()))], labels):
            return False
    return True


FieldGetter = Callable[[dict[str, Any]], str]

_COMMON: dict[str, FieldGetter] = {
    "metadata.name": lambda o: o["metadata"]["name"],
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
}

FIELDS: dict[str, dict[str, FieldGetter]] = {
    "pods": {
        **_COMMON,
        "spec.nodeName": lambda o: o["spec"].get("nodeName", ""),
        "spec.restartPolicy": lambda o: o["spec"].get("restartPolicy", ""),
        "spec.schedulerName": lambda o: o["spec"].get("schedulerName", ""),
        "spec.serviceAccountName": lambda o: o["spec"].get("serviceAccountName", ""),
        "status.phase": lambda o: o.get("status", {}).get("phase", ""),
        "status.podIP": lambda o: o.get("status", {}).get("podIP", ""),
        "status.nominatedNodeName": lambda o: o.get("status", {}).get("nominatedNodeName", ""),
    },
    "events": {
        **_COMMON,
        "involvedObject.kind": lambda o: o["involvedObject"].get("kind", ""),
        "involvedObject.namespace": lambda o: o["involvedObject"].get("namespace", ""),
        "involvedObject.name": lambda o: o["involvedObject"].get("name", ""),
        "involvedObject.uid": lambda o: o["involvedObject"].get("uid", ""),
        "involvedObject.apiVersion": lambda o: o["involvedObject"].get("apiVersion", ""),
        "involvedObject.resourceVersion": lambda o: o["involvedObject"].get("resourceVersion", ""),
        "involvedObject.fieldPath": lambda o: o["involvedObject"].get("fieldPath", ""),
        "reason": lambda o: o.get("reason", ""),
        "reportingComponent": lambda o: o.get("reportingComponent", ""),
        "source": lambda o: o.get("source", {}).get("component", ""),
        "type": lambda o: o.get("type", ""),
    },
    "nodes": {
        **_COMMON,
        "spec.unschedulable": lambda o: str(bool(o["spec"].get("unschedulable", False))).lower(),
    },
    "namespaces": {**_COMMON, "status.phase": lambda o: o.get("status", {}).get("phase", "")},
    "jobs.batch": {
        **_COMMON,
        "status.successful": lambda o: str(o.get("status", {}).get("succeeded", 0)),
    },
}


def parse_field_selector(text: str, res: str) -> list[tuple[FieldGetter, str, str]]:
    getters = FIELDS.get(res, _COMMON)
    reqs = []
    for term in _split_top(text or ""):
        m = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)", term)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        label, op, value = m.group(1), m.group(2), m.group(3)
        if label not in getters:
            raise bad_request(f"field label not supported: {label}")
        reqs.append((getters[label], "!=" if op == "!=" else "=", value))
    return reqs


def fields_match(reqs: list[tuple[FieldGetter, str, str]], obj: dict[str, Any]) -> bool:
    for getter, op, value in reqs:
        actual = getter(obj)
        if (op == "=") != (actual == value):
            return False
    return True
