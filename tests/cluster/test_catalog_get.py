"""catalog_get: the catalog as the models hold it, in a fixed number of statements, never stale."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.models import CatalogSettings, GpuProduct, MigProfile
from cluster.selectors import Catalog, ProductInfo, catalog_get

pytestmark = pytest.mark.django_db


def _catalog_from_models() -> Catalog:
    settings_row = CatalogSettings.objects.order_by("pk").first() or CatalogSettings()
    return Catalog(
        products={
            p.name: ProductInfo(p.name, p.memory_mib, p.gpus_per_node)
            for p in GpuProduct.objects.filter(enabled=True)
        },
        mig_profiles={m.name: m.max_per_node for m in MigProfile.objects.filter(enabled=True)},
        shared_gpu_resource=settings_row.shared_gpu_resource,
        max_shared_per_node=settings_row.max_shared_per_node,
        allowed_registries=tuple(settings_row.registries),
        node_capacity=settings_row.node_capacity,
    )


def test_the_catalog_is_read_in_one_statement_and_matches_the_models(demo: dict[str, Any]) -> None:
    # given the demo catalog, with one product and one MIG profile disabled
    GpuProduct.objects.create(name="Retired-GPU", memory_mib=15360, gpus_per_node=4, enabled=False)
    MigProfile.objects.filter(name="1g.10gb").update(enabled=False)
    # and the nodes' capacity as a catalog refresh records it
    CatalogSettings.objects.update_or_create(
        pk=CatalogSettings.objects.order_by("pk").values_list("pk", flat=True).first(),
        defaults={"node_capacity": {"cpu-only": {"cpu": 32_000, "memory": 128 * 2**30}}},
    )

    # when the catalog is read
    with CaptureQueriesContext(connection) as captured:
        catalog = catalog_get()

    # then it is what the models say, read with one statement
    assert len(captured.captured_queries) == 1
    assert catalog.products and catalog.mig_profiles
    assert catalog == _catalog_from_models()
    assert "Retired-GPU" not in catalog.products
    assert "1g.10gb" not in catalog.mig_profiles
    assert catalog.node_capacity == {"cpu-only": {"cpu": 32_000, "memory": 128 * 2**30}}


def test_a_change_applies_to_the_next_read(demo: dict[str, Any]) -> None:
    # given a settings row and a catalog read once
    CatalogSettings.objects.get_or_create()
    catalog_get()

    # when an admin changes the settings, a product and a MIG profile
    CatalogSettings.objects.update(allowed_registries="nvcr.io\nghcr.io", max_shared_per_node=4)
    GpuProduct.objects.filter(name="NVIDIA-A100-SXM4-80GB").update(gpus_per_node=4)
    MigProfile.objects.update(max_per_node=3)

    # then the next read has the change
    catalog = catalog_get()
    assert catalog == _catalog_from_models()
    assert catalog.allowed_registries == ("nvcr.io", "ghcr.io")
    assert catalog.max_shared_per_node == 4
    assert catalog.products["NVIDIA-A100-SXM4-80GB"].gpus_per_node == 4
    assert set(catalog.mig_profiles.values()) == {3}


def test_without_a_settings_row_the_defaults_apply(demo: dict[str, Any]) -> None:
    CatalogSettings.objects.all().delete()

    catalog = catalog_get()

    assert catalog == _catalog_from_models()
    assert catalog.shared_gpu_resource == CatalogSettings().shared_gpu_resource
