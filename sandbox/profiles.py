"""Cluster profiles: YAML node pools → Node objects and their GPU device inventory.

The labels are the ones GPU Feature Discovery, Node Feature Discovery and the kubelet put
on real nodes, and the allocatable resources are what the NVIDIA device plugin advertises
for each sharing mode (whole GPUs, MIG ``mixed`` strategy, time-slicing replicas).
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sandbox.quantity import format_quantity, parse
from scheduling.gpu_operator_config import (
    DEPLOY_LABEL_PREFIX,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_PRESENT_LABEL,
    MIG_CAPABLE_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_STRATEGY_LABEL,
    OPERANDS,
    SHARED_PRODUCT_SUFFIX,
    SHARING_STRATEGY_LABEL,
    GpuLayout,
    TimeSlicing,
    mig_shapes,
)
from scheduling.resources import ANY_GPU, GPU_PRODUCT_LABEL, GPU_REPLICAS_LABEL, mig_resource

PROFILE_DIR = Path(__file__).parent / "profiles"

# What we know about each product: how DCGM names it and how it behaves under load.
GPU_MODELS: dict[str, dict[str, Any]] = {
    "NVIDIA-A100-SXM4-80GB": {
        "modelName": "NVIDIA A100-SXM4-80GB",
        "family": "ampere",
        "compute": (8, 0),
        "memory": 81920,
        "tdp": 400,
        "idle_power": 58,
        "sm_clock": 1410,
        "mem_clock": 1593,
        "machine": "DGX-A100",
    },
    "NVIDIA-A100-SXM4-40GB": {
        "modelName": "NVIDIA A100-SXM4-40GB",
        "family": "ampere",
        "compute": (8, 0),
        "memory": 40960,
        "tdp": 400,
        "idle_power": 55,
        "sm_clock": 1410,
        "mem_clock": 1215,
        "machine": "DGX-A100",
    },
    "NVIDIA-H100-80GB-HBM3": {
        "modelName": "NVIDIA H100 80GB HBM3",
        "family": "hopper",
        "compute": (9, 0),
        "memory": 81559,
        "tdp": 700,
        "idle_power": 72,
        "sm_clock": 1980,
        "mem_clock": 2619,
        "machine": "DGX-H100",
    },
    "Tesla-T4": {
        "modelName": "Tesla T4",
        "family": "turing",
        "compute": (7, 5),
        "memory": 15360,
        "tdp": 70,
        "idle_power": 14,
        "sm_clock": 1590,
        "mem_clock": 5000,
        "machine": "g4dn.12xlarge",
    },
    "NVIDIA-L4": {
        "modelName": "NVIDIA L4",
        "family": "ada-lovelace",
        "compute": (8, 9),
        "memory": 23034,
        "tdp": 72,
        "idle_power": 16,
        "sm_clock": 2040,
        "mem_clock": 6251,
        "machine": "g6.12xlarge",
    },
}

# A100-80GB MIG profiles: memory (MiB), SM count, slices, and the GPU-instance ids the
# driver hands out for each profile in placement order.
MIG_PROFILES: dict[str, dict[str, Any]] = {
    "1g.10gb": {"memory": 9728, "sm": 14, "slices": 1, "gi_ids": [7, 8, 9, 10, 11, 12, 13]},
    "1g.20gb": {"memory": 19968, "sm": 14, "slices": 1, "gi_ids": [3, 4, 5, 6]},
    "2g.20gb": {"memory": 19968, "sm": 28, "slices": 2, "gi_ids": [3, 4, 5]},
    "3g.40gb": {"memory": 40192, "sm": 42, "slices": 3, "gi_ids": [1, 2]},
    "4g.40gb": {"memory": 40192, "sm": 56, "slices": 4, "gi_ids": [1]},
    "7g.80gb": {"memory": 80896, "sm": 98, "slices": 7, "gi_ids": [0]},
}

PCI_BUS_IDS = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]
DRIVER_VERSION = "550.54.15"
CUDA_VERSION = (12, 4)
KUBELET_VERSION = "v1.33.1"  # the node agent registers nodes with the control plane's own


@dataclass
class Device:
    """A schedulable GPU unit on a node: a whole GPU, a MIG instance or a time-slice."""

    gpu: int  # physical GPU index
    uuid: str
    pci_bus_id: str
    model: str  # product label spelling
    memory_mib: int
    resource: str  # the extended resource a pod requests to get it
    slots: int = 1  # time-slicing replicas; 1 otherwise
    mig_profile: str = ""
    gi_id: int = -1
    mig_uuid: str = ""

    @property
    def id(self) -> str:
        return self.mig_uuid or self.uuid

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Device:
        return Device(**data)


@dataclass
class NodeSpec:
    node: dict[str, Any]
    devices: list[Device] = field(default_factory=list)


def profile_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.exists():
        return path
    candidate = PROFILE_DIR / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    raise FileNotFoundError(f"no profile {name_or_path!r} (looked in {PROFILE_DIR})")


def load_profile(name_or_path: str) -> dict[str, Any]:
    with open(profile_path(name_or_path)) as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("pools"), list):
        raise ValueError("a profile needs a 'pools' list")
    return data


def _uuid(seed: int, *parts: object) -> str:
    digest = hashlib.sha256(("/".join(map(str, (seed, *parts)))).encode()).digest()
    return str(uuidlib.UUID(bytes=digest[:16]))


def _memory_ki(quantity: str) -> int:
    return int(parse(quantity)) // 1024


def build_nodes(profile: dict[str, Any], seed: int, created: str) -> list[NodeSpec]:
    """Expand every pool into ``count`` nodes with labels, taints, resources and devices."""
    specs: list[NodeSpec] = []
    node_index = 0
    for pool_index, pool in enumerate(profile["pools"]):
        for i in range(int(pool.get("count", 1))):
            name = f"{pool.get('namePrefix', pool['name'])}-{i}"
            specs.append(_build_node(pool, name, pool_index, i, node_index, seed, created))
            node_index += 1
    return specs


def _build_node(
    pool: dict[str, Any],
    name: str,
    pool_index: int,
    i: int,
    node_index: int,
    seed: int,
    created: str,
) -> NodeSpec:
    """One node of a pool: its labels (NFD's and GFD's), capacity and allocatable (with its
    GPU devices' resources), taints, addresses and node info."""
    labels = _node_labels(pool, name, node_index)
    capacity, allocatable = _node_resources(pool)
    devices: list[Device] = []
    gpu = pool.get("gpu")
    if gpu:
        devices = _gpu_devices(gpu, name, seed)
        _gpu_labels(pool, labels, devices)
        for resource, count in _device_resources(devices).items():
            capacity[resource] = str(count)
            allocatable[resource] = str(count)
    taints = [
        {k: v for k, v in t.items() if k in ("key", "value", "effect")}
        for t in (pool.get("taints") or [])
    ]
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": created,
        },
        "spec": {
            "podCIDR": f"10.244.{node_index}.0/24",
            "podCIDRs": [f"10.244.{node_index}.0/24"],
            "providerID": f"sandbox://{name}",
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [],  # filled by the kubelet heartbeat
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{pool_index}.{10 + i}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": _node_info(name, seed),
            "images": [],
        },
    }
    if taints:
        node["spec"]["taints"] = taints
    return NodeSpec(node=node, devices=devices)


def _node_labels(pool: dict[str, Any], name: str, node_index: int) -> dict[str, str]:
    instance_type = pool.get("instanceType", "m6i.8xlarge")
    labels: dict[str, str] = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": "sandbox-1",
        "topology.kubernetes.io/zone": f"sandbox-1{'abc'[node_index % 3]}",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-1057-aws",
        "feature.node.kubernetes.io/kernel-version.major": "5",
        "feature.node.kubernetes.io/kernel-version.minor": "15",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
    }
    labels.update({str(k): str(v) for k, v in (pool.get("labels") or {}).items()})
    return labels


def _node_resources(pool: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Capacity and allocatable before GPUs: the kubelet reserves a little CPU and memory
    for the system (kube-reserved)."""
    cpu = str(pool.get("cpu", "32"))
    memory_ki = _memory_ki(str(pool.get("memory", "128Gi")))
    capacity: dict[str, str] = {
        "cpu": cpu,
        "ephemeral-storage": "524275692Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_ki}Ki",
        "pods": str(pool.get("pods", 110)),
    }
    allocatable = dict(capacity)
    allocatable["cpu"] = format_quantity(parse(cpu) - parse("100m"))
    allocatable["memory"] = f"{memory_ki - 1024 * 1024 - 100 * 1024}Ki"
    allocatable["ephemeral-storage"] = "483173420145"
    return capacity, allocatable


def _node_info(name: str, seed: int) -> dict[str, str]:
    return {
        "architecture": "amd64",
        "bootID": _uuid(seed, name, "boot"),
        "containerRuntimeVersion": "containerd://1.7.27",
        "kernelVersion": "5.15.0-1057-aws",
        "kubeProxyVersion": KUBELET_VERSION,
        "kubeletVersion": KUBELET_VERSION,
        "machineID": _uuid(seed, name, "machine").replace("-", ""),
        "operatingSystem": "linux",
        "osImage": "Ubuntu 22.04.4 LTS",
        "systemUUID": _uuid(seed, name, "system"),
    }


def _device_resources(devices: list[Device]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for dev in devices:
        counts[dev.resource] = counts.get(dev.resource, 0) + dev.slots
    return counts


def pool_layouts(gpu: dict[str, Any]) -> dict[int, GpuLayout]:
    """The profile's MIG layout of a pool's GPUs (absent: MIG disabled)."""
    layouts: dict[int, GpuLayout] = {}
    for entry in (gpu.get("mig") or {}).get("layout", []):
        for index in entry["gpus"]:
            layouts[int(index)] = {str(k): int(v) for k, v in entry["profiles"].items()}
    return layouts


def pool_sharing(gpu: dict[str, Any]) -> TimeSlicing:
    """The profile's time-slicing of a pool's GPUs, as the device plugin's config says it."""
    sharing = gpu.get("timeSlicing") or {}
    replicas = int(sharing.get("replicas", 1))
    return TimeSlicing(
        {ANY_GPU: replicas} if replicas > 1 else {}, bool(sharing.get("renameByDefault"))
    )


def pool_mig_config(pool: dict[str, Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """The name and mig-parted entries of a pool's own MIG layout (the operator's
    ConfigMap holds it beside the standard ones), or None without one."""
    gpu = pool.get("gpu") or {}
    mig = gpu.get("mig")
    if not mig:
        return None
    entries = [
        {"devices": list(e["gpus"]), "mig-enabled": True, "mig-devices": dict(e["profiles"])}
        for e in mig.get("layout", [])
    ]
    return str(mig.get("config") or f"{pool['name']}-layout"), entries


def pool_plugin_config(pool: dict[str, Any]) -> tuple[str, TimeSlicing] | None:
    """The name and time-slicing of a pool's device plugin config, or None (the default)."""
    gpu = pool.get("gpu") or {}
    sharing = pool_sharing(gpu)
    if not sharing.replicas:
        return None
    return str((gpu.get("timeSlicing") or {}).get("config") or pool["name"]), sharing


def _gpu_devices(gpu: dict[str, Any], node: str, seed: int) -> list[Device]:
    product = gpu["product"]
    memory = int(gpu.get("memoryMiB", GPU_MODELS.get(product, {}).get("memory", 16384)))
    return gpu_devices(
        node,
        seed,
        product=product,
        memory_mib=memory,
        count=int(gpu.get("count", 1)),
        layouts=pool_layouts(gpu),
        sharing=pool_sharing(gpu),
    )


def gpu_devices(
    node: str,
    seed: int,
    *,
    product: str,
    memory_mib: int,
    count: int,
    layouts: dict[int, GpuLayout],
    sharing: TimeSlicing,
) -> list[Device]:
    """What the device plugin advertises for ``count`` GPUs laid out as ``layouts`` (MIG,
    the ``mixed`` strategy) and shared as ``sharing`` (time-slicing replicas)."""
    shapes = mig_shapes(product)
    devices: list[Device] = []
    for index in range(count):
        uuid = "GPU-" + _uuid(seed, node, "gpu", index)
        bus = f"00000000:{PCI_BUS_IDS[index % len(PCI_BUS_IDS)]}:00.0"
        layout = layouts.get(index)
        if layout is None:
            resource, slots = sharing.offered(ANY_GPU)
            devices.append(Device(index, uuid, bus, product, memory_mib, resource, slots))
            continue
        for profile_name, n in layout.items():
            gi_ids = MIG_PROFILES.get(profile_name, {}).get("gi_ids") or list(range(1, 8))
            resource, slots = sharing.offered(mig_resource(profile_name))
            for k in range(n):
                devices.append(
                    Device(
                        gpu=index,
                        uuid=uuid,
                        pci_bus_id=bus,
                        model=product,
                        memory_mib=shapes[profile_name].memory_mib,
                        resource=resource,
                        slots=slots,
                        mig_profile=profile_name,
                        gi_id=gi_ids[k % len(gi_ids)],
                        mig_uuid="MIG-" + _uuid(seed, node, "mig", index, profile_name, k),
                    )
                )
    return devices


def _gpu_labels(pool: dict[str, Any], labels: dict[str, str], devices: list[Device]) -> None:
    gpu = pool["gpu"]
    product = gpu["product"]
    model = GPU_MODELS.get(product, {})
    memory = int(gpu.get("memoryMiB", model.get("memory", 16384)))
    major, minor = model.get("compute", (8, 0))
    drv = DRIVER_VERSION.split(".")
    labels.update(
        {
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "nvidia.com/cuda.driver-version.full": DRIVER_VERSION,
            "nvidia.com/cuda.driver-version.major": drv[0],
            "nvidia.com/cuda.driver-version.minor": drv[1],
            "nvidia.com/cuda.driver-version.revision": drv[2],
            "nvidia.com/cuda.driver.major": drv[0],
            "nvidia.com/cuda.driver.minor": drv[1],
            "nvidia.com/cuda.driver.rev": drv[2],
            "nvidia.com/cuda.runtime-version.full": f"{CUDA_VERSION[0]}.{CUDA_VERSION[1]}",
            "nvidia.com/cuda.runtime-version.major": str(CUDA_VERSION[0]),
            "nvidia.com/cuda.runtime-version.minor": str(CUDA_VERSION[1]),
            "nvidia.com/cuda.runtime.major": str(CUDA_VERSION[0]),
            "nvidia.com/cuda.runtime.minor": str(CUDA_VERSION[1]),
            "nvidia.com/gfd.timestamp": "1717000000",
            "nvidia.com/gpu.compute.major": str(major),
            "nvidia.com/gpu.compute.minor": str(minor),
            "nvidia.com/gpu.count": str(int(gpu.get("count", 1))),
            "nvidia.com/gpu.family": model.get("family", "unknown"),
            "nvidia.com/gpu.machine": model.get("machine", "unknown"),
            "nvidia.com/gpu.memory": str(memory),
            GPU_PRESENT_LABEL: "true",
        }
    )
    # The operator's: which of its operands run on the node (all, on a GPU node).
    capable = bool(mig_shapes(product))
    for operand in OPERANDS:
        if operand != "mig-manager" or capable:
            labels[DEPLOY_LABEL_PREFIX + operand] = "true"
    if capable:
        # The operator labels a MIG-capable node all-disabled (ClusterPolicy's
        # migManager.config.default) unless it names a layout; the MIG manager applied it.
        own = pool_mig_config(pool)
        labels[MIG_CONFIG_LABEL] = own[0] if own else "all-disabled"
        labels[MIG_CONFIG_STATE_LABEL] = "success"
    plugin_config = pool_plugin_config(pool)
    if plugin_config:
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = plugin_config[0]
    labels.update(gfd_sharing_labels(product, devices, pool_sharing(gpu)))


def gfd_sharing_labels(product: str, devices: list[Device], sharing: TimeSlicing) -> dict[str, str]:
    """GPU Feature Discovery's labels for how a node's GPUs are offered now: the product
    (``-SHARED`` when time-sliced GPUs keep the plain resource name), replicas, sharing
    strategy, MIG capability and strategy, and one set of labels per MIG profile."""
    replicas = sharing.replicas.get(ANY_GPU, 1)
    renamed = sharing.rename_by_default
    labels = {
        GPU_PRODUCT_LABEL: f"{product}{SHARED_PRODUCT_SUFFIX}"
        if replicas > 1 and not renamed
        else product,
        GPU_REPLICAS_LABEL: str(replicas),
        SHARING_STRATEGY_LABEL: "time-slicing" if replicas > 1 else "none",
        MIG_CAPABLE_LABEL: "true" if mig_shapes(product) else "false",
    }
    if mig_shapes(product):
        labels[MIG_STRATEGY_LABEL] = "mixed"
    counts: dict[str, int] = {}
    for dev in devices:
        if dev.mig_profile:
            counts[dev.mig_profile] = counts.get(dev.mig_profile, 0) + 1
    shapes = mig_shapes(product)
    for profile_name, n in sorted(counts.items()):
        shape = shapes[profile_name]
        prefix = f"nvidia.com/mig-{profile_name}"
        labels[f"{prefix}.count"] = str(n)
        labels[f"{prefix}.memory"] = str(shape.memory_mib)
        labels[f"{prefix}.multiprocessors"] = str(shape.multiprocessors)
        labels[f"{prefix}.slices.ci"] = str(shape.compute_slices)
        labels[f"{prefix}.slices.gi"] = str(shape.compute_slices)
        labels[f"{prefix}.engines.copy"] = str(shape.compute_slices)
        labels[f"{prefix}.product"] = f"{product.removeprefix('NVIDIA-')}-MIG-{profile_name}"
    return labels


def device_resources(devices: list[Device]) -> dict[str, int]:
    """What ``devices`` add to a node's capacity."""
    return _device_resources(devices)


def registrable(
    node: dict[str, Any], *, provider: str, address: str, kubelet_version: str
) -> dict[str, Any]:
    """``node`` (from ``build_nodes``) as a kubelet registers it with the real API server: no
    creation time nor pod CIDR (the controller manager's node-IPAM is off: no pod network),
    its provider ID and InternalIP, a kubelet of the control plane's own version (never newer
    than the API server). Changed in place and returned."""
    name = node["metadata"]["name"]
    node["metadata"].pop("creationTimestamp", None)
    node["spec"].pop("podCIDR", None)
    node["spec"].pop("podCIDRs", None)
    node["spec"]["providerID"] = f"{provider}://{name}"
    node["status"]["addresses"] = [
        {"type": "InternalIP", "address": address},
        {"type": "Hostname", "address": name},
    ]
    info = node["status"]["nodeInfo"]
    info["kubeletVersion"] = info["kubeProxyVersion"] = kubelet_version
    return node
