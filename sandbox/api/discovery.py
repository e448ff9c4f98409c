"""Discovery documents: ``/version``, ``/api``, ``/apis`` and per-group resource lists."""

from __future__ import annotations

from typing import Any

from sandbox.api.resources import AGGREGATED, GROUPS, RESOURCES

VERSION = {
    "major": "1",
    "minor": "33",
    "emulationMajor": "1",
    "emulationMinor": "33",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "32",
    "gitVersion": "v1.33.1",
    "gitCommit": "8adc0f041b8e7ad1d30e29cc59c6ae7a15e19828",
    "gitTreeState": "clean",
    "buildDate": "2025-05-15T08:19:08Z",
    "goVersion": "go1.24.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(server: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    }


def _group(group: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in GROUPS[group]]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def api_group_list() -> dict[str, Any]:
    ordered = sorted(GROUPS, key=lambda group: group in AGGREGATED)  # stable: keeps the rest
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in ordered]}


def api_group(group: str) -> dict[str, Any] | None:
    if group not in GROUPS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group)}


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    resources = [r for r in RESOURCES if r.group == group and r.version == version]
    if not resources:
        return None
    items: list[dict[str, Any]] = []
    for r in resources:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.plural in ("pods", "services", "deployments", "replicasets", "daemonsets", "jobs"):
            entry["categories"] = ["all"]
        elif r.categories:
            entry["categories"] = list(r.categories)
        items.append(entry)
        for sub in r.subresources:
            verbs = {"log": ["get"], "eviction": ["create"], "pendingworkloads": ["get"]}.get(
                sub, ["get", "patch", "update"]
            )
            entry = {
                "name": f"{r.plural}/{sub}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": {
                    "scale": "Scale",
                    "eviction": "Eviction",
                    "pendingworkloads": "PendingWorkloadsSummary",
                }.get(sub, r.kind),
                "verbs": verbs,
            }
            if sub == "scale":
                entry.update(group="autoscaling", version="v1")
            elif sub == "eviction":
                entry.update(group="policy", version="v1")
            items.append(entry)
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": items,
    }
