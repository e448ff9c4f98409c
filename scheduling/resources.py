"""The resource and label names of NVIDIA's device plugin and GPU Feature Discovery.

One definition for the whole project: the scheduling core, the cluster adapter, quotas,
manifests and the sandbox all spell them from here.
"""

from __future__ import annotations

# Whole GPUs, as the device plugin advertises them (and time-sliced GPUs too when the
# time-slicing config has renameByDefault: false).
ANY_GPU = "nvidia.com/gpu"
# Time-sliced GPUs when the device plugin's config has renameByDefault: true.
SHARED_GPU = "nvidia.com/gpu.shared"
# MIG instances: nvidia.com/mig-<profile>, e.g. nvidia.com/mig-1g.10gb.
MIG_PREFIX = "nvidia.com/mig-"
CPU = "cpu"
MEMORY = "memory"

# GPU Feature Discovery's node labels.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"


def mig_resource(profile: str) -> str:
    """``1g.10gb`` → ``nvidia.com/mig-1g.10gb``."""
    return f"{MIG_PREFIX}{profile}"


def is_gpu_resource(resource: str) -> bool:
    """Whole, shared or MIG GPUs (not cpu, memory or another extended resource)."""
    return resource in (ANY_GPU, SHARED_GPU) or resource.startswith(MIG_PREFIX)
