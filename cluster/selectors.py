"""Reads for the GPU catalog: what the cluster offers."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.models import CatalogSettings, GpuProduct, MigProfile


@dataclass(frozen=True)
class ProductInfo:
    name: str
    memory_mib: int
    gpus_per_node: int


@dataclass(frozen=True)
class Catalog:
    """What the cluster offers: validation and the form read it."""

    products: dict[str, ProductInfo]
    mig_profiles: dict[str, int]  # profile → most instances on one node
    shared_gpu_resource: str
    max_shared_per_node: int
    allowed_registries: tuple[str, ...] = ()

    @property
    def max_gpus_per_node(self) -> int:
        return max((p.gpus_per_node for p in self.products.values()), default=0)


def catalog_get() -> Catalog:
    """What the cluster offers, read afresh every time (an admin's change applies to the
    next request): the enabled products and MIG profiles, and the settings row (its
    defaults until an admin saves one)."""
    products = GpuProduct.objects.filter(enabled=True).order_by("name")
    profiles = MigProfile.objects.filter(enabled=True).order_by("name")
    settings_row = CatalogSettings.objects.order_by("pk").first() or CatalogSettings()
    return Catalog(
        products={
            p.name: ProductInfo(p.name, p.memory_mib, p.gpus_per_node)
            for p in products.only("name", "memory_mib", "gpus_per_node")
        },
        mig_profiles=dict(profiles.values_list("name", "max_per_node")),
        shared_gpu_resource=settings_row.shared_gpu_resource,
        max_shared_per_node=settings_row.max_shared_per_node,
        allowed_registries=tuple(settings_row.registries),
    )
