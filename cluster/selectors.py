"""Reads for the GPU catalog: what the cluster offers."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.db import connection

from cluster.models import CatalogSettings, GpuProduct, MigProfile
from core.db import Read, reads_fetch


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


# The enabled products and MIG profiles and the settings rows, as rows of one UNION ALL:
# (kind, name, number, number, text); every settings row comes with its id, and the first
# one by id is the settings (as ``.first()``). Plain SQL that SQLite runs too.
_CATALOG_SQL = (
    "SELECT 'product', name, memory_mib, gpus_per_node, '' FROM {products} WHERE enabled "
    "UNION ALL SELECT 'mig', name, max_per_node, 0, '' FROM {mig_profiles} WHERE enabled "
    "UNION ALL SELECT 'settings', shared_gpu_resource, max_shared_per_node, id, "
    "allowed_registries FROM {settings}"
)


@functools.cache
def _catalog_sql() -> str:
    # Only the models' own table names are formatted in; nothing comes from a request.
    quote = connection.ops.quote_name
    return _CATALOG_SQL.format(
        products=quote(GpuProduct._meta.db_table),
        mig_profiles=quote(MigProfile._meta.db_table),
        settings=quote(CatalogSettings._meta.db_table),
    )


def catalog_read() -> Read[Catalog]:
    """What the cluster offers, read afresh every time (an admin's change applies to the
    next request).

    Submitting a job reads it on every request: one fixed statement, sent as it is,
    instead of three ORM queries whose compilation cost more CPU than their round trips.
    """
    return Read(_catalog_sql(), (), _catalog_decode)


def _catalog_decode(rows: list[tuple[Any, ...]]) -> Catalog:
    product_rows, mig_profiles, found = [], {}, []
    for kind, name, number, other, text in rows:
        if kind == "product":
            product_rows.append(ProductInfo(name, number, other))
        elif kind == "mig":
            mig_profiles[name] = number
        else:
            found.append((other, name, number, text))
    settings_row = CatalogSettings()  # the defaults, until an admin saves the settings
    if found:
        _, settings_row.shared_gpu_resource, settings_row.max_shared_per_node, text = min(found)
        settings_row.allowed_registries = text
    return Catalog(
        products={p.name: p for p in sorted(product_rows, key=lambda p: p.name)},
        mig_profiles=dict(sorted(mig_profiles.items())),
        shared_gpu_resource=settings_row.shared_gpu_resource,
        max_shared_per_node=settings_row.max_shared_per_node,
        allowed_registries=tuple(settings_row.registries),
    )


def catalog_get() -> Catalog:
    """``catalog_read`` on its own."""
    catalog: Catalog = reads_fetch(catalog_read())[0]
    return catalog
