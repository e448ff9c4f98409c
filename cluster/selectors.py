"""Reads for the GPU catalog: what the cluster offers."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Value

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
    defaults until an admin saves one).

    Every submit and preview reads it: the three tables as one ``UNION ALL`` of rows
    ``(kind, name, number, number, text)``, one query.
    """
    products = (
        GpuProduct.objects.filter(enabled=True)
        .annotate(kind=Value("product"), text=Value(""))
        .values_list("kind", "name", "memory_mib", "gpus_per_node", "text")
    )
    profiles = (
        MigProfile.objects.filter(enabled=True)
        .annotate(kind=Value("mig"), number=Value(0), text=Value(""))
        .values_list("kind", "name", "max_per_node", "number", "text")
    )
    settings_rows = CatalogSettings.objects.annotate(kind=Value("settings")).values_list(
        "kind", "shared_gpu_resource", "max_shared_per_node", "id", "allowed_registries"
    )
    rows = products.union(profiles, settings_rows, all=True).order_by()
    product_info, mig_profiles = [], {}
    settings_row, settings_id = CatalogSettings(), None  # the defaults, until an admin saves
    for kind, name, number, other, text in rows:
        if kind == "product":
            product_info.append(ProductInfo(name, number, other))
        elif kind == "mig":
            mig_profiles[name] = number
        elif settings_id is None or other < settings_id:  # the first row by id, as .first()
            settings_id = other
            settings_row = CatalogSettings(
                shared_gpu_resource=name, max_shared_per_node=number, allowed_registries=text
            )
    return Catalog(
        products={p.name: p for p in sorted(product_info, key=lambda p: p.name)},
        mig_profiles=dict(sorted(mig_profiles.items())),
        shared_gpu_resource=settings_row.shared_gpu_resource,
        max_shared_per_node=settings_row.max_shared_per_node,
        allowed_registries=tuple(settings_row.registries),
    )
