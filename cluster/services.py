"""Writes for the GPU catalog (discovered from the nodes' GPU Feature Discovery labels), and
the portal's clusters: the first one, and binding the adapter to a job's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from cluster import kube
from cluster.models import CatalogSettings, Cluster, GpuProduct, MigProfile
from scheduling import Node, node_from_k8s
from scheduling.resources import (
    ANY_GPU,
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    MIG_PREFIX,
    SHARED_GPU,
)


@dataclass
class Discovered:
    """What the nodes advertise, each figure the largest any one node has."""

    products: dict[str, tuple[int, int]] = field(default_factory=dict)  # → (MiB, GPUs)
    mig_profiles: dict[str, int] = field(default_factory=dict)  # profile → instances
    shared_resource: str | None = None
    max_shared: int = 0
    # node kind → the most {"cpu": millicores, "memory": bytes} one node of it offers
    node_capacity: dict[str, dict[str, int]] = field(default_factory=dict)

    def offer(self, kind: str, node: Node) -> None:
        most = self.node_capacity.setdefault(kind, {"cpu": 0, "memory": 0})
        for resource in most:
            most[resource] = max(most[resource], node.allocatable.get(resource, 0))


def capacity_kinds(node: Node) -> list[str]:
    """The kinds of job a node could ever run, as ``node_capacity`` keys: ``cpu-only`` for a
    node no taint keeps CPU-only pods off, ``gpu`` and ``product:<name>`` for whole GPUs,
    ``mig:<profile>``, ``shared``. A superset of where the scheduler would place such a job
    (GPU pods may meet other taints), so a request above it can never fit."""
    kinds = []
    if not any(t.effect in ("NoSchedule", "NoExecute") for t in node.taints):
        kinds.append("cpu-only")
    product = node.labels.get(GPU_PRODUCT_LABEL)
    replicas = node.labels.get(GPU_REPLICAS_LABEL, "1") not in ("", "1")
    if node.allocatable.get(ANY_GPU, 0) > 0:
        kinds.append("gpu")
        if product:
            kinds.append(f"product:{product.removesuffix('-SHARED')}")
        if replicas:
            kinds.append("shared")
    if node.allocatable.get(SHARED_GPU, 0) > 0:
        kinds.append("shared")
    kinds.extend(
        f"mig:{r.removeprefix(MIG_PREFIX)}"
        for r, amount in node.allocatable.items()
        if r.startswith(MIG_PREFIX) and amount > 0
    )
    return kinds


def catalog_discover(nodes: list[dict[str, Any]]) -> Discovered:
    """Read GPU products, MIG profiles and time-slicing from the nodes (pure)."""
    found = Discovered()
    for node in nodes:
        parsed = node_from_k8s(node)
        for kind in capacity_kinds(parsed):
            found.offer(kind, parsed)
        labels = (node.get("metadata") or {}).get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        product = labels.get(GPU_PRODUCT_LABEL)
        if product:
            # GFD appends -SHARED to the product of a time-sliced node's GPUs.
            name = product.removesuffix("-SHARED")
            memory = int(labels.get(GPU_MEMORY_LABEL) or 0)
            count = int(labels.get(GPU_COUNT_LABEL) or 0)
            old_memory, old_count = found.products.get(name, (0, 0))
            found.products[name] = (max(memory, old_memory), max(count, old_count))
        for resource, amount in allocatable.items():
            if resource.startswith(MIG_PREFIX):
                profile = resource.removeprefix(MIG_PREFIX)
                found.mig_profiles[profile] = max(found.mig_profiles.get(profile, 0), int(amount))
            elif resource == SHARED_GPU:
                found.shared_resource = SHARED_GPU
                found.max_shared = max(found.max_shared, int(amount))
            elif resource == ANY_GPU and labels.get(GPU_REPLICAS_LABEL, "1") not in ("", "1"):
                # Time-slicing without renameByDefault: shared GPUs are plain nvidia.com/gpu.
                found.shared_resource = found.shared_resource or ANY_GPU
                found.max_shared = max(found.max_shared, int(amount))
    return found


def catalog_refresh() -> dict[str, list[str]]:
    """Update the GPU catalog from the nodes' GPU Feature Discovery labels.

    1. LIST the nodes and read what they offer (``catalog_discover``).
    2. Add the products and MIG profiles the catalog lacks.
    3. Raise per-node maxima to what nodes really offer, and fill a product's memory an
       admin left empty.

    It never deletes, disables or lowers what an admin configured (a node pool may be
    scaled to zero for a while), and it races no admin edit: every change is a conditional
    UPDATE of the columns it owns, so a value an admin saves meanwhile is never written
    back over with one read before. Returns what was added.
    """
    found = catalog_discover(list(kube.list_all("Node")))
    added: dict[str, list[str]] = {"products": [], "mig_profiles": []}
    for name, (memory, count) in sorted(found.products.items()):
        _, created = GpuProduct.objects.get_or_create(
            name=name, defaults={"memory_mib": memory, "gpus_per_node": count}
        )
        if created:
            added["products"].append(name)
            continue
        GpuProduct.objects.filter(name=name, gpus_per_node__lt=count).update(gpus_per_node=count)
        if memory:
            GpuProduct.objects.filter(name=name, memory_mib=0).update(memory_mib=memory)
    for profile, most in sorted(found.mig_profiles.items()):
        memory_gib = int(profile.split(".")[1].removesuffix("gb")) if "." in profile else 0
        _, created = MigProfile.objects.get_or_create(
            name=profile, defaults={"memory_gib": memory_gib, "max_per_node": most}
        )
        if created:
            added["mig_profiles"].append(profile)
    _catalog_settings_follow(found)
    return added


@transaction.atomic
def _catalog_settings_follow(found: Discovered) -> None:
    """The settings row takes the nodes' capacity, each figure only ever raised (a node
    pool scaled to zero, or to smaller nodes, for a while must not make its jobs refused),
    and, when the cluster time-slices GPUs, its time-slicing resource and a per-node
    maximum raised to the cluster's; only those columns are written (an admin's
    registries stay as they are)."""
    changes: dict[str, Any] = {}
    if found.shared_resource:
        changes["shared_gpu_resource"] = found.shared_resource
        changes["max_shared_per_node"] = Greatest(F("max_shared_per_node"), found.max_shared)
    row = CatalogSettings.objects.select_for_update().order_by("pk").first()
    changes["node_capacity"] = _raised(row.node_capacity if row else {}, found.node_capacity)
    if row is None:
        defaults = CatalogSettings()
        changes["max_shared_per_node"] = max(defaults.max_shared_per_node, found.max_shared)
        CatalogSettings.objects.create(**changes)
        return
    CatalogSettings.objects.filter(pk=row.pk).update(**changes)


def _raised(
    known: dict[str, dict[str, int]], seen: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """Each node kind's figures: the larger of what was known and what the nodes show."""
    merged = {kind: dict(figures) for kind, figures in known.items()}
    for kind, figures in seen.items():
        into = merged.setdefault(kind, {})
        for resource, amount in figures.items():
            into[resource] = max(into.get(resource, 0), amount)
    return merged


def cluster_first() -> Cluster:
    """The portal's first cluster, the one its settings reach (``CLUSTER_NAME``): made by a
    migration, and made again from the settings should it be gone (a flushed database)."""
    return Cluster.first()


def cluster_current() -> Cluster:
    """The cluster the Kubernetes adapter is bound to now (``kube.on_cluster``; outside any
    block, the first): what a write to "the cluster" means for the rows it is made from."""
    name = kube.current_cluster().name
    if name == settings.CLUSTER_NAME:
        return cluster_first()
    return Cluster.objects.filter(name=name).first() or cluster_first()


@contextmanager
def on_cluster_row(cluster_id: int | None) -> Iterator[Cluster | None]:
    """Every call of the Kubernetes adapter in the block goes to this cluster (a job's,
    ``Job.cluster_id``); ``None`` (a row from before several clusters) is the first."""
    cluster = Cluster.objects.filter(pk=cluster_id).first() if cluster_id is not None else None
    if cluster is None:
        yield None
        return
    with kube.on_cluster(cluster.access_to()):
        yield cluster


def clusters_tracked() -> list[Cluster]:
    """The clusters whose jobs are followed: every one not disabled (a draining cluster still
    runs what it has), the first one first."""
    first = cluster_first()
    others = Cluster.objects.exclude(pk=first.pk).exclude(state=Cluster.State.DISABLED)
    return (
        [first, *others.order_by("name")]
        if first.state != Cluster.State.DISABLED
        else [*others.order_by("name")]
    )


def cluster_unreachable(*, cluster_id: int, message: str) -> None:
    """Its API server did not answer (or refused the portal): since when, and what it said.
    Its jobs keep their states; ``any`` places new work elsewhere while another answers."""
    Cluster.objects.filter(pk=cluster_id, unreachable_since__isnull=True).update(
        unreachable_since=timezone.now()
    )
    Cluster.objects.filter(pk=cluster_id).update(last_error=message[:2000])


def cluster_answered(*, cluster: Cluster) -> None:
    """It answered again (as read with it: nothing is written while it always has)."""
    if cluster.unreachable_since is not None or cluster.last_error:
        Cluster.objects.filter(pk=cluster.pk).update(unreachable_since=None, last_error="")
