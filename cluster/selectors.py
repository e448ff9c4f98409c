"""Reads for the GPU catalog: what the cluster offers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from cluster.models import CatalogSettings, Cluster


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
    # node kind → the most {"cpu": millicores, "memory": bytes} one node offers, as the
    # last catalog refresh saw the nodes (empty until then: nothing is refused for it)
    node_capacity: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def max_gpus_per_node(self) -> int:
        return max((p.gpus_per_node for p in self.products.values()), default=0)


# The enabled products and MIG profiles and every settings row, as rows of
# (kind, name, number, number, text, json). Plain SQL that PostgreSQL and SQLite both run.
_CATALOG_SQL = """
SELECT 'product', name, memory_mib, gpus_per_node, '', '' FROM cluster_gpuproduct WHERE enabled
UNION ALL
SELECT 'mig', name, max_per_node, 0, '', '' FROM cluster_migprofile WHERE enabled
UNION ALL
SELECT 'settings', shared_gpu_resource, max_shared_per_node, id, allowed_registries,
       CAST(node_capacity AS TEXT)
FROM cluster_catalogsettings
"""


def catalog_get() -> Catalog:
    """What the cluster offers, read afresh every time (an admin's change applies to the
    next request): the enabled products and MIG profiles, and the settings row (its
    defaults until an admin saves one).

    Every submit and preview reads it, so it is one fixed statement run with Django's
    documented ``connection.cursor()`` rather than an ORM query: the ORM's three queries
    (or one ``union()``) cost 1.2–1.4 ms of CPU per call to compile, the statement 0.15 ms
    (in-process, 2026-11-24, 2 AMD EPYC cores); with the team's quotas below it is the
    difference between 0.33× and 0.4× the framework floor in ``make bench NAME=submit``.
    ``tests/cluster/test_catalog_get.py`` pins it to what the models hold.
    """
    with connection.cursor() as cursor:
        cursor.execute(_CATALOG_SQL)
        rows = cursor.fetchall()
    product_info, mig_profiles = [], {}
    settings_row, settings_id = CatalogSettings(), None  # the defaults, until an admin saves
    node_capacity: dict[str, dict[str, int]] = {}
    for kind, name, number, other, text, capacity in rows:
        if kind == "product":
            product_info.append(ProductInfo(name, number, other))
        elif kind == "mig":
            mig_profiles[name] = number
        elif settings_id is None or other < settings_id:  # the first row by id, as .first()
            settings_id = other
            settings_row = CatalogSettings(
                shared_gpu_resource=name, max_shared_per_node=number, allowed_registries=text
            )
            node_capacity = json.loads(capacity) if capacity else {}
    return Catalog(
        products={p.name: p for p in sorted(product_info, key=lambda p: p.name)},
        mig_profiles=dict(sorted(mig_profiles.items())),
        shared_gpu_resource=settings_row.shared_gpu_resource,
        max_shared_per_node=settings_row.max_shared_per_node,
        allowed_registries=tuple(settings_row.registries),
        node_capacity=node_capacity,
    )


def clusters_list() -> list[Cluster]:
    """Every registered cluster, by name (``GET /api/v1/clusters/``)."""
    clusters = list(Cluster.objects.order_by("name"))
    if any(c.name == settings.CLUSTER_NAME for c in clusters):
        return clusters
    Cluster.first()  # made again from the settings (a flushed database lost it)
    return list(Cluster.objects.order_by("name"))


def cluster_choices() -> list[tuple[str, str]]:
    """The clusters a job may be sent to by name (those taking new work), as the forms offer
    them: one that does not answer says since when, so nobody picks it unawares."""
    return [
        (
            c.name,
            f"{c.name} (not answering since {c.unreachable_since:%Y-%m-%d %H:%M} UTC)"
            if c.unreachable_since is not None
            else c.name,
        )
        for c in clusters_list()
        if c.takes_new_work
    ]
