"""The simulated nodes' dcgm-exporter: ``/metrics`` in Prometheus text format.

Values are pure functions of (seed, device, simulated time, what runs on the device), so
two scrapes at the same simulated time agree and a given ``--seed`` replays the same
curves. Training holds GPUs busy with periodic evaluation dips, inference follows a daily
request curve, idle GPUs sit near 0 % and cool down; temperature and power follow
utilisation with a lag. MIG instances carry ``GPU_I_PROFILE``/``GPU_I_ID`` and report
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` instead of ``DCGM_FI_DEV_GPU_UTIL``; time-sliced GPUs
repeat the GPU's series once per pod sharing it.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

from sandbox import annotations as ann
from sandbox import faults
from sandbox.profiles import DRIVER_VERSION, GPU_MODELS, Device
from sandbox.state import Cluster
from sandbox.store import Obj
from scheduling.gpu_operator_config import mig_shapes

FAMILIES: list[tuple[str, str, str]] = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
]
NOISE_BUCKET = 15.0  # seconds between independent noise samples (interpolated between)
DIP_PERIOD, DIP_LENGTH = 600.0, 25.0  # training: evaluation/checkpoint every 10 minutes


def _hash01(*parts: object) -> float:
    return (zlib.crc32("/".join(map(str, parts)).encode()) & 0xFFFFFFFF) / 0xFFFFFFFF


def noise(seed: int, key: str, t: float) -> float:
    """Smooth deterministic noise in [-1, 1]."""
    b = math.floor(t / NOISE_BUCKET)
    frac = t / NOISE_BUCKET - b
    a, c = _hash01(seed, key, b), _hash01(seed, key, b + 1)
    return 2 * (a + (c - a) * frac) - 1


class Holder:
    """A pod holding a device, with what the simulation needs to know about it."""

    def __init__(self, pod: Obj, life: dict[str, Any], busy: bool | None = None) -> None:
        self.pod = pod
        self.life = life
        self.kind = life.get("kind", "training")
        # A real notebook server's GPU (sandbox.servers) is busy while a kernel executes,
        # and idle otherwise; a simulated workload follows its kind.
        self.idle = ann.flag(pod, ann.IDLE) or busy is False
        if busy:
            self.kind = "training"
        self.hot = ann.flag(pod, ann.HOT)
        self.fb_full = ann.flag(pod, ann.FB_FULL)

    def running_at(self, t: float) -> bool:
        started = self.life.get("started")
        if started is None or t < started:
            return False
        finished = self.life.get("finished")
        return not (
            self.life.get("state") in ("done", "backoff") and finished is not None and t >= finished
        )

    def container(self) -> str:
        containers = self.pod["spec"].get("containers") or [{}]
        for c in containers:
            limits = (c.get("resources") or {}).get("limits") or {}
            if any(k.startswith("nvidia.com/") for k in limits):
                return str(c.get("name", ""))
        return str(containers[0].get("name", ""))


def _load(seed: int, dev_key: str, holder: Holder, t: float) -> float:
    """One holder's utilisation in percent at simulated time ``t``."""
    if not holder.running_at(t):
        return 0.0
    if holder.idle:
        return max(0.0, 0.4 + 0.4 * noise(seed, dev_key + "/idle", t))
    if holder.kind == "training":
        since = t - float(holder.life["started"])
        if since < 20:  # data loading before the first step
            return 15.0 + 10 * noise(seed, dev_key + "/warm", t)
        if since % DIP_PERIOD > DIP_PERIOD - DIP_LENGTH:
            return 22.0 + 8 * noise(seed, dev_key + "/dip", t)
        return min(99.0, 92.0 + 5.0 * noise(seed, dev_key + "/train", t))
    hour = (t % 86400) / 3600
    daily = 0.5 + 0.5 * math.sin((hour - 9) / 24 * 2 * math.pi)
    return max(0.0, min(100.0, 12 + 68 * daily + 6 * noise(seed, dev_key + "/infer", t)))


def _util(seed: int, dev_key: str, holders: list[Holder], t: float) -> float:
    return min(100.0, sum(_load(seed, dev_key, h, t) for h in holders))


def bank_energy(cluster: Cluster, pod: Obj, entry: dict[str, Any]) -> None:
    """Keep the energy a finished pod drew so the energy counter never goes backwards."""
    life = cluster.store.meta_get(f"life/{pod['metadata'].get('uid', '')}") or {}
    started = life.get("started")
    if started is None:
        return
    end = life.get("finished") or cluster.now()
    busy = 0.02 if ann.flag(pod, ann.IDLE) else (0.9 if life.get("kind") == "training" else 0.5)
    for dev in cluster.devices(entry.get("node", "")):
        if dev.id in entry.get("devices", []):
            model = GPU_MODELS.get(dev.model, {})
            extra = (model.get("tdp", 300) - model.get("idle_power", 50)) * busy
            key = f"energy/{entry['node']}/{dev.gpu}"
            total = float(cluster.store.meta_get(key, 0.0))
            cluster.store.meta_set(key, total + extra * max(0.0, end - started) * 1000)


def _fmt(value: float, integer: bool) -> str:
    return str(round(value)) if integer else f"{value:.6f}"


def render(cluster: Cluster) -> str:
    """The whole exposition, one sample per device (per holder for shared GPUs)."""
    with cluster.store.serving():
        t = cluster.now()
        seed = cluster.options.seed
        boot = float(cluster.store.meta_get("cluster_created", t))
        by_uid = {p["metadata"]["uid"]: p for p in cluster.store.iter("pods")}
        holders_by_dev: dict[tuple[str, str], list[Holder]] = {}
        for key in cluster.store.meta_keys("assign/"):
            uid = key[len("assign/") :]
            entry = cluster.store.meta_get(key) or {}
            pod = by_uid.get(uid)
            life = cluster.store.meta_get(f"life/{uid}")
            if pod is None or life is None or life.get("state") == "done":
                continue
            for dev_id in entry.get("devices", []):
                busy = cluster.servers.busy(uid) if life.get("real") else None
                holders_by_dev.setdefault((entry["node"], dev_id), []).append(
                    Holder(pod, life, busy)
                )
        samples: dict[str, list[str]] = {name: [] for name, _, _ in FAMILIES}
        for node in cluster.store.list("nodes"):
            node_name = node["metadata"]["name"]
            if faults.node_down(cluster, node_name):
                continue  # its exporter went down with it
            devices = cluster.devices(node_name)
            by_gpu: dict[int, list[Device]] = {}
            for dev in devices:
                by_gpu.setdefault(dev.gpu, []).append(dev)
            for gpu_index, devs in sorted(by_gpu.items()):
                _gpu_samples(
                    cluster, samples, node_name, gpu_index, devs, holders_by_dev, t, seed, boot
                )
    out: list[str] = []
    for name, kind, help_text in FAMILIES:
        if not samples[name]:
            continue
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(samples[name])
    return "\n".join(out) + "\n"


def _gpu_samples(
    cluster: Cluster,
    samples: dict[str, list[str]],
    node: str,
    gpu_index: int,
    devs: list[Device],
    holders_by_dev: dict[tuple[str, str], list[Holder]],
    t: float,
    seed: int,
    boot: float,
) -> None:
    banked = float(cluster.store.meta_get(f"energy/{node}/{gpu_index}", 0.0))
    fault = faults.gpu_fault(cluster, node, gpu_index) or {}
    for reading in gpu_readings(
        seed=seed,
        node=node,
        devs=devs,
        holders_by_dev=holders_by_dev,
        t=t,
        boot=boot,
        banked_energy=banked,
    ):
        if fault:
            # The last XID stays until the driver reloads; the ECC count only grows.
            reading.values["DCGM_FI_DEV_XID_ERRORS"] = float(fault.get("xid", 0))
            reading.values["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = float(fault.get("ecc_dbe", 0))
            if _remaps_rows(devs[0].model):
                # Ampere and later remap a row for each uncorrectable error (Turing retires
                # pages instead and reports no remapped rows).
                reading.values["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] = float(
                    fault.get("ecc_dbe", 0)
                )
        for name, _, _ in FAMILIES:
            if name not in reading.values:
                continue
            text = format_value(name, reading.values[name])
            for ls in reading.label_sets:
                samples[name].append(f"{name}{{{ls}}} {text}")


def format_value(name: str, value: float) -> str:
    """A sample value as the exporter prints it: whole numbers except power and ratios."""
    integer = name not in ("DCGM_FI_DEV_POWER_USAGE",) and not name.startswith("DCGM_FI_PROF")
    return _fmt(value, integer)


class Reading:
    """One device's values at one instant, and the label sets it is exposed under (one per
    pod sharing it, or one without pod labels when nobody holds it)."""

    __slots__ = ("device", "label_sets", "values")

    def __init__(self, device: Device, values: dict[str, float], label_sets: list[str]) -> None:
        self.device = device
        self.values = values
        self.label_sets = label_sets


def device_labels(device: Device, node: str) -> str:
    """The exporter's labels of a device (without the holding pod's)."""
    model = GPU_MODELS.get(device.model, {})
    labels = (
        f'gpu="{device.gpu}",UUID="{device.uuid}",pci_bus_id="{device.pci_bus_id}",'
        f'device="nvidia{device.gpu}",modelName="{model.get("modelName", device.model)}"'
    )
    if device.mig_profile:
        labels += f',GPU_I_PROFILE="{device.mig_profile}",GPU_I_ID="{device.gi_id}"'
    return labels + f',Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'


def _remaps_rows(model: str) -> bool:
    return GPU_MODELS.get(model, {}).get("family") in ("ampere", "ada-lovelace", "hopper")


def gpu_readings(
    *,
    seed: int,
    node: str,
    devs: list[Device],
    holders_by_dev: dict[tuple[str, str], list[Holder]],
    t: float,
    boot: float,
    banked_energy: float,
) -> list[Reading]:
    """Every device of one physical GPU (its MIG instances, or the GPU itself) at time ``t``.

    A pure function of its arguments: the live exporter calls it with the cluster's state,
    the history writer (``sandbox.history``) with a simulated workload.

    1. The physical GPU's temperature, power and energy, from its load (MIG instances
       weighted by their slice share of 7) a little while back.
    2. Per device: its own utilisation, framebuffer and the fields derived from them,
       labelled once per pod holding it (or once, unheld).
    """
    weights = [(dev, holders_by_dev.get((node, dev.id), [])) for dev in devs]
    physical = _physical_state(seed, weights, t, boot, banked_energy)
    readings: list[Reading] = []
    for dev, hs in weights:
        values = _device_values(seed, dev, hs, t, physical)
        labels = device_labels(dev, node)
        label_sets = [labels]
        if hs:
            label_sets = [
                labels
                + f',container="{h.container()}",namespace="{h.pod["metadata"]["namespace"]}"'
                f',pod="{h.pod["metadata"]["name"]}"'
                for h in hs
            ]
        readings.append(Reading(dev, values, label_sets))
    return readings


@dataclass(frozen=True)
class _Physical:
    """What the whole GPU reports, whichever of its devices is read."""

    temp: float
    power: float
    energy: float
    model: dict[str, Any]


def _physical_state(
    seed: int,
    weights: list[tuple[Device, list[Holder]]],
    t: float,
    boot: float,
    banked_energy: float,
) -> _Physical:
    first = weights[0][0]
    model = GPU_MODELS.get(first.model, {})
    tdp, idle_power = float(model.get("tdp", 300)), float(model.get("idle_power", 50))
    idle_temp = 30.0 + 4 * _hash01(seed, first.uuid, "ambient")
    busy_temp = 68.0 + (8 if model.get("family") == "hopper" else 0)
    all_holders = [h for _, hs in weights for h in hs]

    def gpu_util(at: float) -> float:
        if not first.mig_profile:
            return _util(seed, first.uuid, weights[0][1], at)
        return sum(
            _util(seed, d.id, hs, at) * mig_shapes(d.model)[d.mig_profile].compute_slices / 7
            for d, hs in weights
        )

    temp_util = sum(gpu_util(t - lag) for lag in (15, 45, 90, 150)) / 4
    power_util = sum(gpu_util(t - lag) for lag in (0, 5)) / 2
    temp = (
        idle_temp
        + (busy_temp - idle_temp) * temp_util / 100
        + 0.8 * noise(seed, first.uuid + "/temp", t)
    )
    if any(h.hot for h in all_holders):
        temp = 88.0 + 2.5 * noise(seed, first.uuid + "/hot", t)
    power = idle_power + (tdp - idle_power) * power_util / 100
    power *= 1 + 0.03 * noise(seed, first.uuid + "/power", t)
    energy = banked_energy + idle_power * max(0.0, t - boot) * 1000
    for h in all_holders:
        started = h.life.get("started")
        if started is not None and h.life.get("state") != "done":
            busy = 0.02 if h.idle else (0.9 if h.kind == "training" else 0.5)
            energy += (tdp - idle_power) * busy * max(0.0, t - float(started)) * 1000
    return _Physical(temp=temp, power=power, energy=energy, model=model)


def _framebuffer_used(
    seed: int, dev: Device, running: list[Holder], util: float, t: float, reserved: int
) -> float:
    """MiB in use: nearly all of it for a pod that fills it, a share per kind of work, a
    trace when nothing runs."""
    key, total = dev.id, dev.memory_mib
    used = 0.0
    if any(h.fb_full for h in running):
        used = total - reserved - (300 + 500 * _hash01(seed, key, "fbfull"))
    elif running:
        for h in running:
            if h.idle:
                share = 0.06
            elif h.kind == "training":
                share = 0.78 + 0.04 * noise(seed, key + "/fb", t)
            else:
                share = 0.45 + 0.1 * util / 100
            used += share * total / max(1, len(running)) if len(running) > 1 else share * total
    else:
        used = 1.0 if not dev.mig_profile else 0.0
    return max(0.0, min(total - reserved, used))


def _device_values(
    seed: int, dev: Device, hs: list[Holder], t: float, physical: _Physical
) -> dict[str, float]:
    util = _util(seed, dev.id, hs, t)
    reserved = max(1, int(dev.memory_mib * 0.0075))
    running = [h for h in hs if h.running_at(t)]
    used = _framebuffer_used(seed, dev, running, util, t, reserved)
    training = any(h.kind == "training" for h in running)
    model = physical.model
    values: dict[str, float] = {
        "DCGM_FI_DEV_SM_CLOCK": float(model.get("sm_clock", 1410)) if util > 3 else 210.0,
        "DCGM_FI_DEV_MEM_CLOCK": float(model.get("mem_clock", 1593)),
        "DCGM_FI_DEV_MEMORY_TEMP": physical.temp + 4,
        "DCGM_FI_DEV_GPU_TEMP": physical.temp,
        "DCGM_FI_DEV_POWER_USAGE": physical.power,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": physical.energy,
        "DCGM_FI_DEV_MEM_COPY_UTIL": util * (0.45 if training else 0.3),
        "DCGM_FI_DEV_ENC_UTIL": 0.0,
        "DCGM_FI_DEV_DEC_UTIL": 0.0,
        "DCGM_FI_DEV_XID_ERRORS": 0.0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
        "DCGM_FI_DEV_FB_FREE": dev.memory_mib - reserved - used,
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_RESERVED": float(reserved),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": min(1.0, util / 100 * 0.98),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": util / 100 * (0.55 if training else 0.3),
        "DCGM_FI_PROF_DRAM_ACTIVE": util / 100 * 0.42,
    }
    if not dev.mig_profile:
        values["DCGM_FI_DEV_GPU_UTIL"] = util
    return values
