"""API-server defaulting: the fields a real server fills in before validation."""

from __future__ import annotations

import base64
import copy
from typing import Any

from sandbox.api.resources import ResourceType


def _image_pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def default_pod_spec(spec: dict[str, Any], restart_policy: str = "Always") -> None:
    spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        container.setdefault("imagePullPolicy", _image_pull_policy(container.get("image") or ""))
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        resources = container.setdefault("resources", {})
        # A limit without a request defaults the request to the limit; that is how
        # ``limits: {nvidia.com/gpu: 1}`` alone becomes a GPU request the scheduler counts.
        limits = resources.get("limits") or {}
        if limits:
            requests = resources.setdefault("requests", {})
            for name, value in limits.items():
                requests.setdefault(name, value)
        for port in container.get("ports") or []:
            port.setdefault("protocol", "TCP")


def apply_defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if rt.plural == "pods" and isinstance(spec, dict):
        default_pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif rt.plural == "jobs" and isinstance(spec, dict):
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
            spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        spec.setdefault("manualSelector", None)
        if spec.get("manualSelector") is None:
            spec.pop("manualSelector")
        template = spec.setdefault("template", {})
        template.setdefault("metadata", {})
        default_pod_spec(template.setdefault("spec", {}), "Never")
    elif rt.plural in ("deployments", "replicasets") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10) if rt.plural == "deployments" else None
        if rt.plural == "deployments":
            spec.setdefault("progressDeadlineSeconds", 600)
            strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
            if strategy.get("type", "RollingUpdate") == "RollingUpdate":
                strategy.setdefault("type", "RollingUpdate")
                strategy.setdefault("rollingUpdate", {"maxSurge": "25%", "maxUnavailable": "25%"})
        template = spec.setdefault("template", {})
        template.setdefault("metadata", {})
        default_pod_spec(template.setdefault("spec", {}))
    elif rt.plural == "services" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    elif rt.plural == "secrets":
        # stringData is write-only: the API server merges it into data (base64), its keys
        # winning, and never stores or returns it.
        plain = obj.pop("stringData", None) or {}
        if plain:
            data = obj.setdefault("data", {}) or {}
            data.update({k: base64.b64encode(str(v).encode()).decode() for k, v in plain.items()})
            obj["data"] = data
        obj.setdefault("type", "Opaque")
    elif rt.plural == "priorityclasses":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif rt.plural == "limitranges" and isinstance(spec, dict):
        for limit in spec.get("limits") or []:
            # LimitRange defaulting: a missing defaultRequest copies default, then max.
            if limit.get("type") == "Container":
                default = limit.setdefault("default", copy.deepcopy(limit.get("max") or {}))
                if not default:
                    limit.pop("default")
                request = limit.setdefault("defaultRequest", copy.deepcopy(default or {}))
                if not request:
                    limit.pop("defaultRequest")
