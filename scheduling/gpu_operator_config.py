"""What NVIDIA's GPU Operator reads and writes, as pure data: MIG geometry per product,
mig-parted's config file and the device plugin's config file.

The sandbox's MIG manager and device plugin apply these files; the portal reads the same
files to offer only the layouts a node's GPUs can take and to preview what a change does
to capacity. One reading for both, as for the scheduler's semantics.

The formats are NVIDIA's: ``mig-parted`` (``api/spec/v1``: ``version: v1``, ``mig-configs``
of ``{device-filter, devices, mig-enabled, mig-devices}``) and ``k8s-device-plugin``
(``api/config/v1``: ``sharing.timeSlicing.{renameByDefault, failRequestsGreaterThanOne,
resources[].{name, replicas}}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from scheduling.resources import ANY_GPU, SHARED_GPU, mig_resource

# -- the operator's names -----------------------------------------------------------------------
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
PAUSED_FOR_MIG_CHANGE = "paused-for-mig-change"
# The MIG manager's progress in nvidia.com/mig.config.state.
MIG_STATES = ("pending", "rebooting", "success", "failed")
# The operands the operator deploys on a GPU node (nvidia.com/gpu.deploy.<component>), in
# the order its states run; mig-manager only on MIG-capable nodes.
OPERANDS = (
    "driver",
    "container-toolkit",
    "operator-validator",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "gpu-feature-discovery",
    "mig-manager",
    "node-status-exporter",
)
# What the MIG manager pauses while it re-partitions (the GPU's clients).
PAUSED_BY_MIG_MANAGER = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")
SHARED_PRODUCT_SUFFIX = "-SHARED"


# -- MIG geometry ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class MigShape:
    """One MIG profile on one product: its memory, SMs, the compute and memory slices it
    takes of the GPU's seven and eight, and how many one GPU holds at most."""

    name: str
    memory_mib: int
    multiprocessors: int
    compute_slices: int
    memory_slices: int
    max_count: int


def _shapes(*rows: tuple[str, int, int, int, int, int]) -> dict[str, MigShape]:
    return {row[0]: MigShape(*row) for row in rows}


_MIG_80GB = _shapes(
    ("1g.10gb", 9728, 14, 1, 1, 7),
    ("1g.20gb", 19968, 14, 1, 2, 4),
    ("2g.20gb", 19968, 28, 2, 2, 3),
    ("3g.40gb", 40192, 42, 3, 4, 2),
    ("4g.40gb", 40192, 56, 4, 4, 1),
    ("7g.80gb", 80896, 98, 7, 8, 1),
)
_MIG_40GB = _shapes(
    ("1g.5gb", 4864, 14, 1, 1, 7),
    ("1g.10gb", 9856, 14, 1, 2, 4),
    ("2g.10gb", 9856, 28, 2, 2, 3),
    ("3g.20gb", 19968, 42, 3, 4, 2),
    ("4g.20gb", 19968, 56, 4, 4, 1),
    ("7g.40gb", 40192, 98, 7, 8, 1),
)
COMPUTE_SLICES = 7
MEMORY_SLICES = 8


@dataclass(frozen=True)
class GpuModel:
    """A product as GPU Feature Discovery names it, with its PCI device id (mig-parted's
    ``device-filter`` spelling, ``0x<device><vendor>``) and its MIG profiles (none: no MIG)."""

    product: str
    pci_device_id: str
    mig: dict[str, MigShape] = field(default_factory=dict)


GPU_MODELS: dict[str, GpuModel] = {
    m.product: m
    for m in (
        GpuModel("NVIDIA-A100-SXM4-80GB", "0x20B210DE", _MIG_80GB),
        GpuModel("NVIDIA-A100-SXM4-40GB", "0x20B010DE", _MIG_40GB),
        GpuModel("NVIDIA-H100-80GB-HBM3", "0x233010DE", _MIG_80GB),
        GpuModel("Tesla-T4", "0x1EB810DE"),
        GpuModel("NVIDIA-L4", "0x27B810DE"),
    )
}


def base_product(product: str) -> str:
    """GFD's product label without the ``-SHARED`` it adds on time-sliced GPUs."""
    return product.removesuffix(SHARED_PRODUCT_SUFFIX)


def mig_shapes(product: str) -> dict[str, MigShape]:
    """The MIG profiles ``product`` offers; empty when it has no MIG."""
    model = GPU_MODELS.get(base_product(product))
    return dict(model.mig) if model else {}


def mig_problem(product: str, mig_devices: dict[str, int]) -> str | None:
    """Why one GPU of ``product`` cannot be partitioned as ``mig_devices``, in words, or
    None when it can (each profile exists, within its count, and the slices fit)."""
    shapes = mig_shapes(product)
    name = base_product(product)
    if not shapes:
        return f"{name} has no MIG"
    compute = memory = 0
    for profile, count in mig_devices.items():
        shape = shapes.get(profile)
        if shape is None:
            return f"{name} has no MIG profile {profile} (it offers {', '.join(shapes)})"
        if count > shape.max_count:
            return f"one {name} holds at most {shape.max_count} × {profile}, not {count}"
        compute += shape.compute_slices * count
        memory += shape.memory_slices * count
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        return (
            f"{_layout_words(mig_devices)} needs {compute} compute and {memory} memory slices; "
            f"one {name} has {COMPUTE_SLICES} and {MEMORY_SLICES}"
        )
    return None


def _layout_words(mig_devices: dict[str, int]) -> str:
    return " + ".join(f"{n} × {p}" for p, n in sorted(mig_devices.items())) or "MIG with no devices"


# -- mig-parted's config ---------------------------------------------------------------------
class ConfigError(ValueError):
    """A config file that does not parse or breaks its format's rules (in words)."""


@dataclass(frozen=True)
class MigEntry:
    """One entry of a mig-parted config: which GPUs (indexes, or all; restricted to PCI
    device ids by ``device_filter``) and what they become."""

    devices: tuple[int, ...] | None  # None: all
    device_filter: tuple[str, ...]  # empty: any product
    mig_enabled: bool
    mig_devices: dict[str, int]

    def matches(self, index: int, product: str) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        if not self.device_filter:
            return True
        model = GPU_MODELS.get(base_product(product))
        return model is not None and model.pci_device_id.upper() in {
            f.upper() for f in self.device_filter
        }


def parse_mig_parted_config(text: str) -> dict[str, list[MigEntry]]:
    """``mig-configs`` of a mig-parted config file, by name. Raises ``ConfigError``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not YAML: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != "v1":
        raise ConfigError("a mig-parted config starts with version: v1")
    configs = data.get("mig-configs")
    if not isinstance(configs, dict):
        raise ConfigError("a mig-parted config needs a mig-configs map")
    return {
        str(name): [_mig_entry(name, e) for e in entries or []] for name, entries in configs.items()
    }


def _mig_entry(name: str, raw: Any) -> MigEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: each entry is a map")
    unknown = set(raw) - {"devices", "device-filter", "mig-enabled", "mig-devices"}
    if unknown:
        raise ConfigError(f"{name}: unknown field {sorted(unknown)[0]}")
    devices_raw = raw.get("devices", "all")
    devices = None if devices_raw == "all" else tuple(int(d) for d in devices_raw)
    filter_raw = raw.get("device-filter") or ()
    device_filter = (filter_raw,) if isinstance(filter_raw, str) else tuple(filter_raw)
    enabled = bool(raw.get("mig-enabled", False))
    mig_devices = {str(p): int(n) for p, n in (raw.get("mig-devices") or {}).items()}
    if not enabled and mig_devices:
        raise ConfigError(f"{name}: mig-devices must be empty when mig-enabled is false")
    return MigEntry(devices, tuple(str(f) for f in device_filter), enabled, mig_devices)


GpuLayout = dict[str, int] | None  # a GPU's MIG devices; None: MIG disabled (a whole GPU)


def gpu_layouts(entries: list[MigEntry], product: str, gpu_count: int) -> dict[int, GpuLayout]:
    """What each GPU of a node becomes under a config; GPUs no entry matches are left as
    they are (absent from the result), as mig-parted leaves them."""
    result: dict[int, GpuLayout] = {}
    for index in range(gpu_count):
        for entry in entries:
            if entry.matches(index, product):
                result[index] = dict(entry.mig_devices) if entry.mig_enabled else None
    return result


def layout_problem(name: str, entries: list[MigEntry], product: str, gpu_count: int) -> str | None:
    """Why config ``name`` cannot be applied to a node of ``gpu_count`` × ``product``, or
    None when it can."""
    layouts = gpu_layouts(entries, product, gpu_count)
    if not layouts:
        return f"layout {name} has no entry for {base_product(product)}"
    for layout in layouts.values():
        if layout is None:
            continue
        problem = mig_problem(product, layout)
        if problem:
            return f"layout {name}: {problem}"
    return None


def layout_resources(
    layouts: dict[int, GpuLayout], sharing: TimeSlicing | None = None
) -> dict[str, int]:
    """The extended resources GPUs laid out so offer (the ``mixed`` strategy: one
    ``nvidia.com/mig-<profile>`` per instance, a whole GPU per MIG-disabled GPU), each
    advertised as the device plugin's time-slicing says."""
    sharing = sharing or TimeSlicing({})
    offered: dict[str, int] = {}
    for layout in layouts.values():
        units = (
            [(ANY_GPU, 1)] if layout is None else [(mig_resource(p), n) for p, n in layout.items()]
        )
        for resource, count in units:
            name, replicas = sharing.offered(resource)
            offered[name] = offered.get(name, 0) + count * replicas
    return offered


# -- the device plugin's config --------------------------------------------------------------
@dataclass(frozen=True)
class TimeSlicing:
    """A device plugin config's ``sharing.timeSlicing`` (empty ``replicas``: no sharing)."""

    replicas: dict[str, int]  # by resource name (nvidia.com/gpu, nvidia.com/mig-1g.10gb)
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False

    def offered(self, resource: str) -> tuple[str, int]:
        """The resource a device of ``resource`` is advertised as, and how many times."""
        replicas = self.replicas.get(resource, 1)
        if replicas > 1 and self.rename_by_default:
            return (SHARED_GPU if resource == ANY_GPU else f"{resource}.shared"), replicas
        return resource, replicas


def parse_device_plugin_config(text: str) -> TimeSlicing:
    """One named config of the device plugin's ConfigMap. Raises ``ConfigError``."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"not YAML: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != "v1":
        raise ConfigError("a device plugin config starts with version: v1")
    sharing = (data.get("sharing") or {}).get("timeSlicing")
    if sharing is None:
        return TimeSlicing({})
    resources = sharing.get("resources") or []
    if not resources:
        raise ConfigError("sharing.timeSlicing.resources must list at least one resource")
    replicas: dict[str, int] = {}
    for item in resources:
        name, count = str(item.get("name", "")), item.get("replicas")
        if not isinstance(count, int) or count < 2:
            raise ConfigError(f"sharing.timeSlicing.resources[{name}].replicas must be 2 or more")
        replicas[name] = count
    return TimeSlicing(
        replicas,
        bool(sharing.get("renameByDefault", False)),
        bool(sharing.get("failRequestsGreaterThanOne", False)),
    )


def device_plugin_config_text(sharing: TimeSlicing) -> str:
    """The config file for ``sharing`` (what the portal writes into the ConfigMap)."""
    data: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": "mixed"}}
    if sharing.replicas:
        data["sharing"] = {
            "timeSlicing": {
                "renameByDefault": sharing.rename_by_default,
                "failRequestsGreaterThanOne": sharing.fail_requests_greater_than_one,
                "resources": [
                    {"name": r, "replicas": n} for r, n in sorted(sharing.replicas.items())
                ],
            }
        }
    return yaml.safe_dump(data, sort_keys=False)
