"""catalog_refresh: what the nodes' GFD labels add to the catalog, and what it never touches."""

from __future__ import annotations

from typing import Any

import pytest

from cluster import kube
from cluster.models import CatalogSettings, GpuProduct, MigProfile
from cluster.services import catalog_refresh

pytestmark = pytest.mark.django_db


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(
    labels: dict[str, str], allocatable: dict[str, str], *, tainted: bool = True
) -> dict[str, Any]:
    return {
        "metadata": {"name": labels.get("nvidia.com/gpu.product", "cpu"), "labels": labels},
        "spec": {"taints": [GPU_TAINT] if tainted else []},
        "status": {"allocatable": allocatable},
    }


NODES = [
    node(
        {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "nvidia.com/gpu.memory": "81920",
            "nvidia.com/gpu.count": "8",
        },
        {"nvidia.com/gpu": "8", "cpu": "64", "memory": "1152Gi"},
    ),
    node(
        {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.count": "1"},
        {"nvidia.com/gpu.shared": "24", "nvidia.com/mig-1g.10gb": "7", "cpu": "48"},
    ),
    node({}, {"cpu": "31900m", "memory": "128Gi"}, tainted=False),
]


@pytest.fixture
def nodes(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setattr(kube, "list_all", lambda kind, **_: list(NODES) if kind == "Node" else [])
    return NODES


def test_an_empty_catalog_gets_what_the_nodes_offer(nodes: list[dict[str, Any]]) -> None:
    added = catalog_refresh()

    assert added == {"products": ["NVIDIA-A100-SXM4-80GB", "Tesla-T4"], "mig_profiles": ["1g.10gb"]}
    assert MigProfile.objects.get().max_per_node == 7
    settings_row = CatalogSettings.objects.get()
    assert (settings_row.shared_gpu_resource, settings_row.max_shared_per_node) == (
        "nvidia.com/gpu.shared",
        24,
    )


def test_what_an_admin_set_is_kept_and_only_raised_or_filled(nodes: list[dict[str, Any]]) -> None:
    # Given an admin's catalog: fewer A100s per node and no memory; a T4 disabled, with more
    # GPUs per node than the nodes show; registries and a higher time-slicing maximum
    GpuProduct.objects.create(name="NVIDIA-A100-SXM4-80GB", memory_mib=0, gpus_per_node=4)
    GpuProduct.objects.create(
        name="Tesla-T4", memory_mib=15360, gpus_per_node=4, enabled=False, description="spare"
    )
    CatalogSettings.objects.create(allowed_registries="nvcr.io", max_shared_per_node=64)

    # When the catalog is refreshed from the nodes
    assert catalog_refresh() == {"products": [], "mig_profiles": ["1g.10gb"]}

    # Then the A100's maximum is raised and its memory filled in
    a100 = GpuProduct.objects.get(name="NVIDIA-A100-SXM4-80GB")
    assert (a100.gpus_per_node, a100.memory_mib) == (8, 81920)
    # and nothing an admin chose is lowered, re-enabled or overwritten
    t4 = GpuProduct.objects.get(name="Tesla-T4")
    assert (t4.gpus_per_node, t4.memory_mib, t4.enabled, t4.description) == (
        4,
        15360,
        False,
        "spare",
    )
    settings_row = CatalogSettings.objects.get()
    assert settings_row.allowed_registries == "nvcr.io"
    assert settings_row.max_shared_per_node == 64


def test_the_nodes_capacity_is_recorded_per_kind_of_job_they_can_run(
    nodes: list[dict[str, Any]],
) -> None:
    catalog_refresh()

    capacity = CatalogSettings.objects.get().node_capacity
    gib = 2**30
    assert capacity == {
        "cpu-only": {"cpu": 31_900, "memory": 128 * gib},  # only the untainted node
        "gpu": {"cpu": 64_000, "memory": 1152 * gib},
        "product:NVIDIA-A100-SXM4-80GB": {"cpu": 64_000, "memory": 1152 * gib},
        "shared": {"cpu": 48_000, "memory": 0},
        "mig:1g.10gb": {"cpu": 48_000, "memory": 0},
    }


def test_capacity_learnt_from_nodes_now_gone_is_kept(nodes: list[dict[str, Any]]) -> None:
    # Given a catalog that saw 64-core CPU nodes before their pool scaled to zero
    gib = 2**30
    CatalogSettings.objects.create(
        node_capacity={"cpu-only": {"cpu": 64_000, "memory": 64 * gib}, "old": {"cpu": 1}}
    )

    # When the catalog is refreshed from today's smaller nodes
    catalog_refresh()

    # Then every figure is the larger of the two, and nothing learnt is forgotten
    capacity = CatalogSettings.objects.get().node_capacity
    assert capacity["cpu-only"] == {"cpu": 64_000, "memory": 128 * gib}
    assert capacity["old"] == {"cpu": 1}
    assert capacity["gpu"] == {"cpu": 64_000, "memory": 1152 * gib}
