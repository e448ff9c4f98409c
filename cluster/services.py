"""Writes for the GPU catalog: discovered from the nodes' GPU Feature Discovery labels."""

from __future__ import annotations

from cluster import kube
from cluster.models import CatalogSettings, GpuProduct, MigProfile
from scheduling.resources import ANY_GPU, MIG_PREFIX, SHARED_GPU


def _strip_shared(product: str) -> str:
    return product.removesuffix("-SHARED")


def catalog_refresh() -> dict[str, list[str]]:
    """Update the GPU catalog from the nodes' GPU Feature Discovery labels.

    Adds products and MIG profiles the cluster has and raises per-node maxima to what
    nodes really offer; it never deletes or disables what an admin configured (a node
    pool may be scaled to zero for a while). Returns what was added.
    """
    products: dict[str, tuple[int, int]] = {}  # product → (MiB per GPU, most GPUs on a node)
    mig: dict[str, int] = {}
    shared_resource, max_shared = None, 0
    for node in kube.list_all("Node"):
        labels = (node.get("metadata") or {}).get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        product = labels.get("nvidia.com/gpu.product")
        if product:
            name = _strip_shared(product)
            memory = int(labels.get("nvidia.com/gpu.memory") or 0)
            count = int(labels.get("nvidia.com/gpu.count") or 0)
            old_memory, old_count = products.get(name, (0, 0))
            products[name] = (max(memory, old_memory), max(count, old_count))
        for resource, amount in allocatable.items():
            if resource.startswith(MIG_PREFIX):
                profile = resource[len(MIG_PREFIX) :]
                mig[profile] = max(mig.get(profile, 0), int(amount))
            elif resource == SHARED_GPU:
                shared_resource = SHARED_GPU
                max_shared = max(max_shared, int(amount))
            elif resource == ANY_GPU and labels.get("nvidia.com/gpu.replicas", "1") not in (
                "",
                "1",
            ):
                shared_resource = shared_resource or ANY_GPU
                max_shared = max(max_shared, int(amount))
    added: dict[str, list[str]] = {"products": [], "mig_profiles": []}
    for name, (memory, count) in sorted(products.items()):
        row, created = GpuProduct.objects.get_or_create(
            name=name, defaults={"memory_mib": memory, "gpus_per_node": count}
        )
        if created:
            added["products"].append(name)
        elif count > row.gpus_per_node or (memory and not row.memory_mib):
            row.gpus_per_node = max(row.gpus_per_node, count)
            row.memory_mib = row.memory_mib or memory
            row.save(update_fields=["gpus_per_node", "memory_mib"])
    for profile, most in sorted(mig.items()):
        memory_gib = int(profile.split(".")[1].removesuffix("gb")) if "." in profile else 0
        _, created = MigProfile.objects.get_or_create(
            name=profile, defaults={"memory_gib": memory_gib, "max_per_node": most}
        )
        if created:
            added["mig_profiles"].append(profile)
    if shared_resource:
        row_settings = CatalogSettings.objects.first() or CatalogSettings()
        row_settings.shared_gpu_resource = shared_resource
        row_settings.max_shared_per_node = max(row_settings.max_shared_per_node, max_shared)
        row_settings.save()
    return added
