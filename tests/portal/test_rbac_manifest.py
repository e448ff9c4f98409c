"""deploy/rbac.yaml grants what the adapter uses, and nothing broad."""

from __future__ import annotations

from pathlib import Path

import yaml

from jobs.manifests import validate_manifests

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"

# (apiGroup, resource, verb) for every call cluster/kube.py makes.
NEEDED = {
    ("", "namespaces", "get"), ("", "namespaces", "create"), ("", "namespaces", "update"),
    ("", "resourcequotas", "get"), ("", "resourcequotas", "create"),
    ("", "resourcequotas", "update"), ("", "limitranges", "get"), ("", "limitranges", "create"),
    ("", "limitranges", "update"), ("scheduling.k8s.io", "priorityclasses", "get"),
    ("scheduling.k8s.io", "priorityclasses", "create"),
    ("scheduling.k8s.io", "priorityclasses", "update"),
    ("batch", "jobs", "get"), ("batch", "jobs", "list"), ("batch", "jobs", "create"),
    ("batch", "jobs", "delete"), ("apps", "deployments", "get"), ("apps", "deployments", "list"),
    ("apps", "deployments", "create"), ("apps", "deployments", "delete"),
    ("", "services", "get"), ("", "services", "create"), ("", "services", "delete"),
    ("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list"), ("", "nodes", "list"),
    ("apps", "deployments/scale", "update"), ("", "nodes", "patch"),
    ("networking.k8s.io", "networkpolicies", "get"),
    ("networking.k8s.io", "networkpolicies", "create"),
    ("networking.k8s.io", "networkpolicies", "update"),
    ("networking.k8s.io", "networkpolicies", "delete"),
    *(
        ("kueue.x-k8s.io", kind, verb)
        for kind in ("resourceflavors", "clusterqueues", "localqueues")
        for verb in ("get", "list", "create", "update", "delete")
    ),
    ("kueue.x-k8s.io", "workloads", "list"), ("kueue.x-k8s.io", "workloads", "watch"),
    ("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads", "get"),
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get"),
}  # fmt: skip


def _rules() -> list[dict]:
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    return role["rules"]


def test_rbac_objects_are_valid_kubernetes() -> None:
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    assert validate_manifests(docs, "1.33") == []


def test_rbac_has_no_wildcards_and_never_reads_secrets() -> None:
    for rule in _rules():
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
        if "secrets" in rule["resources"]:
            # A workspace's token Secret is written and deleted; no Secret is ever read.
            assert set(rule["verbs"]) <= {"create", "update", "delete"}, rule


def test_rbac_grants_every_call_the_adapter_makes() -> None:
    granted = {
        (group, resource, verb)
        for rule in _rules()
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert sorted(NEEDED - granted) == []
