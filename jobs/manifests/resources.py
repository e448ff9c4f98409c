"""GPU resource names and the cpu/memory a pod gets when the spec leaves them empty.

Every function here is pure, so the submit form can call ``resource_defaults``
to show "resources that will be applied" before anything is built.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from jobs.manifests.context import ManifestContext
from jobs.spec import JobSpec
from scheduling import parse_quantity
from scheduling.quantity import canonical_quantity
from scheduling.resources import ANY_GPU, mig_resource

Resources = dict[str, dict[str, str]]


# Sizing per GPU, from the GPU guides (docs/references.md, "Right-sizing": 6-8 CPU cores and
# 12-16 GB RAM per GPU, minimum 8 GB). We take the top of both ranges for a
# whole GPU because a starved data loader leaves an expensive GPU idle, which
# costs more than a few spare cores.
CPU_PER_GPU = 8
MEMORY_GI_PER_GPU = 16
# Floor for any GPU-backed pod, MIG slice or time-sliced share alike: the
# guides' "minimum 8GB" and two cores (one for the framework, one for loading).
MIN_GPU_POD_CPU = 2
MIN_GPU_POD_MEMORY_GI = 8
# A MIG profile "<g>g.<mem>gb" owns g of the GPU's 7 compute slices, so it gets
# g/7 of a whole GPU's cpu and memory, rounded up, never below the floor:
# 1g → 2 cores/8Gi, 3g → 4 cores/8Gi, 4g → 5 cores/10Gi, 7g → 8 cores/16Gi.
MIG_COMPUTE_SLICES = 7
# A time-sliced share is a fraction of one GPU (the device plugin's
# time-slicing with 4 replicas per GPU, docs/references.md): 8 cores / 4 =
# 2 cores; 16 GB / 4 = 4 GB, lifted to the 8 GB floor.
CPU_PER_SHARED_GPU = 2
MEMORY_GI_PER_SHARED_GPU = 8
# A CPU-only job (preprocessing, evaluation) still needs room for Python and
# its libraries, but must not reserve a GPU node's worth of resources.
CPU_ONLY_CPU = 1
CPU_ONLY_MEMORY_GI = 2

# /dev/shm is a memory-backed emptyDir: what is written there counts against
# the container's memory limit, so it gets half of that limit, and at most
# 32Gi, which is plenty for PyTorch DataLoader workers and NCCL's intra-node
# buffers.
SHM_FRACTION = Decimal(1) / 2
SHM_CAP_BYTES = 32 * 2**30

_MIG_PROFILE = re.compile(r"^(?P<slices>[1-7])g\.")


def gpu_resource_name(spec: JobSpec, ctx: ManifestContext) -> str | None:
    """The extended resource one pod requests, or None for a CPU-only job."""
    gpu = spec.gpu
    if gpu.count <= 0:
        return None
    if gpu.sharing == "mig":
        return mig_resource(_mig_profile(spec))
    if gpu.sharing == "shared":
        return ctx.shared_gpu_resource
    return ANY_GPU


def _mig_profile(spec: JobSpec) -> str:
    if not spec.gpu.mig_profile:
        raise ValueError("gpu.mig_profile is required when gpu.sharing is 'mig'")
    return spec.gpu.mig_profile


def mig_compute_slices(mig_profile: str) -> int:
    """Compute slices (of 7) a MIG profile such as ``1g.10gb`` or ``3g.40gb`` owns."""
    match = _MIG_PROFILE.match(mig_profile)
    if match is None:
        raise ValueError(f"not a MIG profile: {mig_profile!r} (expected e.g. '1g.10gb')")
    return int(match.group("slices"))


def resource_defaults(spec: JobSpec) -> Resources:
    """cpu and memory applied per pod when ``spec.cpu`` / ``spec.memory`` are empty.

    Requests equal limits (see ``container_resources``). The numbers scale with
    the GPUs (or MIG slices, or shared GPUs) one pod requests; see the sizing
    constants above for where they come from.
    """
    gpu = spec.gpu
    if gpu.count <= 0:
        cpu, memory_gi = CPU_ONLY_CPU, CPU_ONLY_MEMORY_GI
    elif gpu.sharing == "mig":
        slices = mig_compute_slices(_mig_profile(spec))
        cpu_per = max(MIN_GPU_POD_CPU, math.ceil(CPU_PER_GPU * slices / MIG_COMPUTE_SLICES))
        memory_per = max(
            MIN_GPU_POD_MEMORY_GI, math.ceil(MEMORY_GI_PER_GPU * slices / MIG_COMPUTE_SLICES)
        )
        cpu, memory_gi = cpu_per * gpu.count, memory_per * gpu.count
    elif gpu.sharing == "shared":
        cpu, memory_gi = CPU_PER_SHARED_GPU * gpu.count, MEMORY_GI_PER_SHARED_GPU * gpu.count
    else:
        cpu, memory_gi = CPU_PER_GPU * gpu.count, MEMORY_GI_PER_GPU * gpu.count
    values = {"cpu": str(cpu), "memory": f"{memory_gi}Gi"}
    return {"requests": dict(values), "limits": dict(values)}


def cpu_and_memory(spec: JobSpec) -> dict[str, str]:
    """The main container's cpu and memory: as asked, or sized from its GPUs."""
    defaults = resource_defaults(spec)["limits"]
    return {"cpu": spec.cpu or defaults["cpu"], "memory": spec.memory or defaults["memory"]}


def container_resources(spec: JobSpec, ctx: ManifestContext) -> Resources:
    """The ``resources`` block of the main container.

    Requests equal limits for cpu and memory too: the pod gets the Guaranteed
    QoS class, so a node under memory pressure evicts it last and the kubelet's
    static CPU manager can pin whole cores next to the GPUs. Extended resources
    such as ``nvidia.com/gpu`` must have requests equal to limits anyway.
    """
    values = cpu_and_memory(spec)
    gpu_name = gpu_resource_name(spec, ctx)
    if gpu_name is not None:
        values[gpu_name] = str(spec.gpu.count)
    return {"requests": dict(values), "limits": dict(values)}


def format_memory(num_bytes: int) -> str:
    """Bytes rounded down to Mi, as the shortest exact binary quantity (``8Gi``, ``1536Mi``)."""
    return canonical_quantity((num_bytes // 2**20) * 2**20, binary=True)


def shm_size_limit(memory_limit: str) -> str:
    """``sizeLimit`` of the memory-backed ``/dev/shm`` for a given memory limit."""
    limit_bytes = parse_quantity(memory_limit)
    return format_memory(max(min(int(limit_bytes * SHM_FRACTION), SHM_CAP_BYTES), 2**20))
