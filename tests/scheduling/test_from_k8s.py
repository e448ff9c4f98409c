from __future__ import annotations

from typing import Any

import pytest

from scheduling import (
    LabelSelector,
    NodeSelectorRequirement,
    Taint,
    Toleration,
    node_from_k8s,
    pod_from_k8s,
    pod_is_terminal,
    pod_requests,
    schedule,
)

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "dgx-a100-01",
        "labels": {
            "kubernetes.io/hostname": "dgx-a100-01",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "nvidia.com/gpu.count": "8",
        },
    },
    "spec": {
        "unschedulable": True,
        "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/unschedulable",
                "effect": "NoSchedule",
                "timeAdded": "2025-01-01T00:00:00Z",
            },
        ],
    },
    "status": {
        "capacity": {"cpu": "256", "memory": "2113404120Ki", "nvidia.com/gpu": "8", "pods": "110"},
        "allocatable": {
            "cpu": "255900m",
            "memory": "2112253144Ki",
            "ephemeral-storage": "1797677265555",
            "hugepages-1Gi": "0",
            "nvidia.com/gpu": "8",
            "nvidia.com/mig-1g.10gb": "0",
            "pods": "110",
        },
    },
}

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-0-abcde",
        "namespace": "team-vision",
        "uid": "6f1c2b4e-0000-4000-8000-000000000001",
        "labels": {"job-name": "train", "batch.kubernetes.io/job-name": "train"},
    },
    "spec": {
        "priorityClassName": "research-high",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        "containers": [
            {
                "name": "main",
                "image": "pytorch:2.4",
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi"},
                    "limits": {"nvidia.com/gpu": "4", "memory": "64Gi"},
                },
            },
            {"name": "sidecar-logger", "image": "fluent-bit", "resources": {}},
        ],
        "initContainers": [
            {"name": "fetch-data", "resources": {"requests": {"cpu": "16", "memory": "8Gi"}}}
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.memory",
                                    "operator": "Gt",
                                    "values": ["40000"],
                                }
                            ]
                        },
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["x"]}
                            ]
                        },
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 20,
                        "preference": {
                            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]
                        },
                    }
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchLabels": {"job-name": "train"},
                            "matchExpressions": [
                                {"key": "role", "operator": "NotIn", "values": ["ps"]}
                            ],
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    },
                    {"topologyKey": "kubernetes.io/hostname"},  # no selector: selects nothing
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"team": "nlp"}},
                            "topologyKey": "zone",
                            "namespaceSelector": {},
                        },
                    }
                ],
            },
        },
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "dedicated", "value": "vision"},
        ],
    },
    "status": {"phase": "Pending"},
}


def test_node_from_k8s() -> None:
    n = node_from_k8s(NODE)
    assert n.name == "dgx-a100-01"
    assert n.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert n.unschedulable is True
    assert n.taints == (
        Taint("nvidia.com/gpu", "present", "NoSchedule"),
        Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),
    )
    assert n.allocatable == {
        "cpu": 255_900,
        "memory": 2112253144 * 1024,
        "ephemeral-storage": 1797677265555,
        "hugepages-1Gi": 0,
        "nvidia.com/gpu": 8,
        "nvidia.com/mig-1g.10gb": 0,
        "pods": 110,
    }


def test_node_without_allocatable_falls_back_to_capacity() -> None:
    obj = {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4", "pods": "10"}}}
    assert node_from_k8s(obj).allocatable == {"cpu": 4000, "pods": 10}


def test_pod_from_k8s() -> None:
    p = pod_from_k8s(POD, {"research-high": (1000, "PreemptLowerPriority")})
    assert (p.name, p.namespace, p.uid) == (
        "train-0-abcde",
        "team-vision",
        "6f1c2b4e-0000-4000-8000-000000000001",
    )
    assert p.key == "team-vision/train-0-abcde"
    assert p.priority == 1000
    assert p.preemption_policy == "PreemptLowerPriority"
    # GPU request defaulted from the limit; init container's 16 CPUs beat the 8 of the app.
    assert p.requests == {"cpu": 16_000, "memory": 64 * 2**30, "nvidia.com/gpu": 4}
    assert p.node_selector == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    first, second = p.required_node_affinity
    assert first.match_expressions == (
        NodeSelectorRequirement("nvidia.com/gpu.memory", "Gt", ("40000",)),
    )
    assert second.match_fields == (NodeSelectorRequirement("metadata.name", "In", ("x",)),)
    assert p.preferred_node_affinity[0].weight == 20
    (anti,) = p.required_pod_anti_affinity  # the selector-less term is dropped
    assert anti.label_selector == LabelSelector(
        match_labels=(("job-name", "train"),),
        match_expressions=(NodeSelectorRequirement("role", "NotIn", ("ps",)),),
    )
    (weighted,) = p.preferred_pod_anti_affinity
    assert weighted.weight == 10
    assert weighted.term.topology_key == "zone"
    assert weighted.term.all_namespaces is True
    assert p.tolerations == (
        Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
        Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
        Toleration("dedicated", "Equal", "vision", ""),
    )
    assert p.node_name is None


@pytest.mark.parametrize(
    ("spec_extra", "classes", "priority", "policy"),
    [
        ({"priority": 5}, {"research-high": (1000, "Never")}, 5, "Never"),
        (
            {"preemptionPolicy": "Never"},
            {"research-high": (1000, "PreemptLowerPriority")},
            1000,
            "Never",
        ),
        ({}, {"research-high": (1000, "Never")}, 1000, "Never"),
        ({}, None, 0, "PreemptLowerPriority"),
    ],
)
def test_priority_resolution(
    spec_extra: dict[str, Any],
    classes: dict[str, tuple[int, str]] | None,
    priority: int,
    policy: str,
) -> None:
    obj = {**POD, "spec": {**POD["spec"], **spec_extra}}
    p = pod_from_k8s(obj, classes)
    assert (p.priority, p.preemption_policy) == (priority, policy)


def _container(requests: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests}, **extra}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [_container({"cpu": "1"}), _container({"cpu": "500m"})]}, {"cpu": 1500}),
        (
            {
                "containers": [_container({"cpu": "1"})],
                "initContainers": [_container({"cpu": "2"}), _container({"cpu": "3"})],
            },
            {"cpu": 3000},
        ),
        (
            # a sidecar keeps running: it adds to the app containers and to later init steps
            {
                "containers": [_container({"cpu": "1"})],
                "initContainers": [
                    _container({"cpu": "500m"}, restartPolicy="Always"),
                    _container({"cpu": "2"}),
                ],
            },
            {"cpu": 2500},
        ),
        (
            {"containers": [_container({"cpu": "1"})], "overhead": {"cpu": "250m"}},
            {"cpu": 1250},
        ),
        ({"containers": [{"name": "c"}]}, {}),
    ],
)
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == expected


def test_bound_pod_keeps_node_name_and_is_used_for_fit() -> None:
    running = {
        "metadata": {"name": "old", "namespace": "default"},
        "spec": {
            "nodeName": "dgx-a100-01",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
        },
        "status": {"phase": "Running"},
    }
    n = node_from_k8s({**NODE, "spec": {}})
    bound = pod_from_k8s(running)
    assert bound.node_name == "dgx-a100-01"
    incoming = pod_from_k8s(POD, {"research-high": (0, "PreemptLowerPriority")})
    incoming_no_affinity = pod_from_k8s(
        {**POD, "spec": {**POD["spec"], "affinity": {}}}, {"research-high": (0, "")}
    )
    assert schedule(incoming, [n], [bound]).node_reasons == {
        "dgx-a100-01": "node(s) didn't match Pod's node affinity/selector"
    }
    assert schedule(incoming_no_affinity, [n], [bound]).reasons == {
        "Insufficient nvidia.com/gpu": 1
    }


@pytest.mark.parametrize(
    ("phase", "terminal"),
    [("Succeeded", True), ("Failed", True), ("Running", False), ("Pending", False)],
)
def test_pod_is_terminal(phase: str, terminal: bool) -> None:
    assert pod_is_terminal({"status": {"phase": phase}}) is terminal
