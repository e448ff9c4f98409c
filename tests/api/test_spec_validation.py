"""Bad input gets a 400 naming the field and the fix, and nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from jobs.models import Job
from tests.conftest import inference_spec, training_spec

pytestmark = pytest.mark.django_db


def rejected(client: APIClient, spec: dict[str, Any]) -> dict[str, list[str]]:
    response = client.post("/api/v1/jobs/", spec, format="json")
    assert response.status_code == 400, response.json()
    assert Job.objects.count() == 0
    body = response.json()
    assert body["detail"]
    return body["errors"]


@pytest.mark.parametrize(
    "spec,field,words",
    [
        (training_spec(gpu={"count": 0.5}), "gpu.count", ["sharing", "mig", "shared"]),
        (training_spec(gpu={"count": "1.5"}), "gpu.count", ["whole"]),
        (training_spec(gpu={"count": -1}), "gpu.count", ["negative"]),
        (training_spec(gpu={"count": "two"}), "gpu.count", ["whole number"]),
        (training_spec(gpu={"count": 1, "mig_profile": "1g.10gb"}), "gpu.mig_profile", ["mig"]),
        (training_spec(gpu={"count": 1, "sharing": "mig"}), "gpu.mig_profile", ["Choose"]),
        (
            training_spec(gpu={"count": 1, "sharing": "mig", "mig_profile": "7g.80gb"}),
            "gpu.mig_profile",
            ["Unknown MIG profile", "1g.10gb"],
        ),
        (
            training_spec(gpu={"count": 1, "sharing": "mig", "mig_profile": "big"}),
            "gpu.mig_profile",
            ["1g.10gb"],
        ),
        (
            training_spec(gpu={"count": 1, "product": "NVIDIA-B200"}),
            "gpu.product",
            ["Unknown GPU product", "NVIDIA-A100-SXM4-80GB"],
        ),
        (training_spec(gpu={"count": 9}), "gpu.count", ["No node has 9", "8"]),
        (training_spec(gpu={"count": 6, "product": "Tesla-T4"}), "gpu.count", ["Tesla-T4", "4"]),
        (
            training_spec(gpu={"count": 1, "sharing": "shared", "product": None}, workers=9),
            "gpu.count",
            ["quota", "nvidia.com/gpu.shared"],
        ),
        (training_spec(gpu={"count": 8}, workers=3), "gpu.count", ["quota", "16", "24"]),
        (training_spec(gpu={"count": 0, "sharing": "shared"}), "gpu.count", ["at least 1"]),
        (training_spec(name="ResNet_50"), "name", ["DNS-1123"]),
        (training_spec(name="-resnet"), "name", ["DNS-1123"]),
        (training_spec(name="a" * 41), "name", ["40"]),
        (training_spec(image="not an image!"), "image", ["image"]),
        (training_spec(cpu="-1"), "cpu", ["quantity"]),
        (training_spec(cpu="0"), "cpu", ["more than 0"]),
        (training_spec(cpu="4000"), "cpu", ["256"]),
        (training_spec(memory="100Ti"), "memory", ["2Ti"]),
        (training_spec(memory="lots"), "memory", ["16Gi"]),
        (training_spec(workers=0), "workers", ["greater than or equal to 1"]),
        (training_spec(retries=100), "retries", ["less than or equal to 10"]),
        (training_spec(launcher="trainjob", retries=2), "retries", ["TrainJob", "Use 0"]),
        (training_spec(max_runtime_seconds=5), "max_runtime_seconds", ["60"]),
        (training_spec(replicas=2), "replicas", ["inference jobs only"]),
        (inference_spec(workers=2), "workers", ["training jobs only"]),
        (inference_spec(port=80), "port", ["1024", "non-root"]),
        (inference_spec(health_path="healthz"), "health_path", ["/"]),
        (training_spec(kind="batch"), "kind", ["valid choice"]),
        (training_spec(priority="urgent"), "priority", ["valid choice"]),
        (training_spec(env={"1BAD": "x"}), "env", ["variable name"]),
        (training_spec(env={"MASTER_ADDR": "x"}), "env", ["set by the portal"]),
        (
            training_spec(volumes=[{"claim": "Data_Set", "mount_path": "/data"}]),
            "volumes[0].claim",
            ["PersistentVolumeClaim"],
        ),
        (
            training_spec(volumes=[{"claim": "data", "mount_path": "data"}]),
            "volumes[0].mount_path",
            ["absolute"],
        ),
        (
            training_spec(volumes=[{"claim": "data", "mount_path": "/etc/ssl"}]),
            "volumes[0].mount_path",
            ["system path"],
        ),
        (
            training_spec(
                volumes=[{"claim": "a", "mount_path": "/d"}, {"claim": "b", "mount_path": "/d"}]
            ),
            "volumes",
            ["same mount_path"],
        ),
        (training_spec(hostNetwork=True), "hostNetwork", ["Unknown field"]),
        (training_spec(gpu={"count": 1, "vendor": "amd"}), "gpu.vendor", ["Unknown field"]),
        (
            training_spec(volumes=[{"claim": "d", "mount_path": "/d", "hostPath": "/"}]),
            "volumes[0].hostPath",
            ["Unknown field"],
        ),
        (training_spec(team="nlp"), "team", ["not a member"]),
        (training_spec(team="no-such-team"), "team", ["not a member"]),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_bad_input_is_refused_with_the_field_and_a_fix(
    alice_api: APIClient, spec: dict[str, Any], field: str, words: list[str]
) -> None:
    errors = rejected(alice_api, spec)

    assert field in errors, errors
    message = " ".join(errors[field])
    for word in words:
        assert word in message, (word, message)


def test_a_team_without_quota_for_a_gpu_kind_is_told_what_it_has(carol_api: APIClient) -> None:
    # nlp only has quota for A100s: "any GPU" would let it run on H100s it has no quota for.
    errors = rejected(carol_api, training_spec(team="nlp", gpu={"count": 1}))

    assert "no quota for GPUs of any product" in errors["gpu.count"][0]
    assert "NVIDIA-A100-SXM4-80GB" in errors["gpu.count"][0]


def test_a_team_with_product_quota_may_use_that_product(carol_api: APIClient) -> None:
    response = carol_api.post(
        "/api/v1/jobs/",
        training_spec(team="nlp", gpu={"count": 8, "product": "NVIDIA-A100-SXM4-80GB"}),
        format="json",
    )

    assert response.status_code == 201


def test_non_object_body_is_refused(alice_api: APIClient) -> None:
    response = alice_api.post("/api/v1/jobs/", [1, 2], format="json")

    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_missing_required_fields_are_each_named(alice_api: APIClient) -> None:
    errors = rejected(alice_api, {"team": "vision"})

    assert {"name", "kind", "image"} <= set(errors)


# The nodes as a catalog refresh records them: CPU nodes of 32 cores / 128 GiB, A100 nodes
# of 96 cores / 1,152 GiB.
NODE_CAPACITY = {
    "cpu-only": {"cpu": 32_000, "memory": 128 * 2**30},
    "gpu": {"cpu": 96_000, "memory": 1152 * 2**30},
    "product:NVIDIA-A100-SXM4-80GB": {"cpu": 96_000, "memory": 1152 * 2**30},
}


@pytest.fixture
def known_nodes(demo: dict[str, Any]) -> None:
    from cluster.models import CatalogSettings

    CatalogSettings.objects.update_or_create(
        pk=CatalogSettings.objects.order_by("pk").values_list("pk", flat=True).first(),
        defaults={"node_capacity": NODE_CAPACITY},
    )


@pytest.mark.parametrize(
    "spec,field,message",
    [
        (
            training_spec(gpu={"count": 0}, cpu="250"),
            "cpu",
            "No node can run a pod with 250 CPUs: the largest node without GPUs has 32. "
            "Ask for at most 32 per pod, and use more workers for more.",
        ),
        (
            training_spec(gpu={"count": 0}, memory="200Gi"),
            "memory",
            "No node can run a pod with 200 GiB memory: the largest node without GPUs has "
            "128. Ask for at most 128 per pod, and use more workers for more.",
        ),
        (
            training_spec(gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"}, cpu="100"),
            "cpu",
            "No node can run a pod with 100 CPUs: the largest NVIDIA-A100-SXM4-80GB node has "
            "96. Ask for at most 96 per pod, and use more workers for more.",
        ),
    ],
)
def test_cpu_or_memory_no_node_could_ever_hold_is_refused_like_gpus(
    alice_api: APIClient, known_nodes: None, spec: dict[str, Any], field: str, message: str
) -> None:
    # Given the nodes the last catalog refresh saw; When alice asks for more than any holds
    errors = rejected(alice_api, spec)
    # Then the field is named with the largest node's capacity, in the same unit
    assert errors == {field: [message]}


def test_what_the_largest_node_holds_is_accepted_and_waits_for_capacity(
    alice_api: APIClient, known_nodes: None
) -> None:
    response = alice_api.post(
        "/api/v1/jobs/", training_spec(gpu={"count": 0}, cpu="32", memory="128Gi"), format="json"
    )
    assert response.status_code == 201, response.json()
