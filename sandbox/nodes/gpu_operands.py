"""NVIDIA's GPU Operator on the simulated nodes: the ClusterPolicy's status, the MIG
manager and the device plugin's config manager. (The operands' pods are the real DaemonSet
controller's: one per node labelled ``nvidia.com/gpu.deploy.<operand>=true``, gone when the
MIG manager sets it to ``paused-for-mig-change``.)

- **ClusterPolicy.** ``status.state`` is ``ready`` while every operand pod is Ready, else
  ``notReady`` with the operator's ``Ready``/``Error`` conditions naming the states not ready.
- **MIG manager** (``NVIDIA/mig-parted``'s k8s-mig-manager). When a node's
  ``nvidia.com/mig.config`` names a layout it has not applied: ``failed`` for a name the
  config lacks, ``success`` at once when the GPUs already have it; otherwise ``pending``, the
  GPU clients paused, and after ``MIG_RECONFIGURE_SECONDS`` the layout applied — unless a
  running pod holds a GPU that must change (the driver refuses, ``In use by another
  client``): ``failed``, the clients restored, the reason in the MIG manager's log. On
  success the node's devices, capacity, allocatable, GFD labels and DCGM series change.
- **Device plugin.** When the node's ``nvidia.com/device-plugin.config`` or the config it
  names changes, the plugin restarts with it after ``PLUGIN_RESTART_SECONDS``: replicas and
  the rename decide allocatable and GFD's product label. A label naming no config leaves
  the plugin on its old config (the real config manager exits and crash-loops).
"""

from __future__ import annotations

from typing import Any

from sandbox import faults
from sandbox.gpu_operator_install import (
    CLUSTER_POLICY,
    CLUSTER_POLICY_KEY,
    DEFAULT_PLUGIN_CONFIG,
    MIG_PARTED_CONFIG_MAP,
    MIG_PARTED_KEY,
    NAMESPACE,
    OPERAND_PODS,
)
from sandbox.profiles import Device, device_resources, gfd_sharing_labels, gpu_devices
from sandbox.state import Cluster
from sandbox.store import Obj
from scheduling.gpu_operator_config import (
    DEPLOY_LABEL_PREFIX,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_PRESENT_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    PAUSED_BY_MIG_MANAGER,
    PAUSED_FOR_MIG_CHANGE,
    ConfigError,
    GpuLayout,
    TimeSlicing,
    base_product,
    gpu_layouts,
    parse_device_plugin_config,
    parse_mig_parted_config,
)
from scheduling.resources import (
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    is_gpu_resource,
)

MIG_RECONFIGURE_SECONDS = 45.0  # simulated: pause the clients, wait for them, apply, restore
PLUGIN_RESTART_SECONDS = 8.0  # simulated: the config manager's SIGHUP, re-registration
# The operator's state names, as its ClusterPolicy status reports them.
STATE_NAMES = {
    "driver": "state-driver",
    "container-toolkit": "state-container-toolkit",
    "operator-validator": "state-operator-validation",
    "device-plugin": "state-device-plugin",
    "dcgm": "state-dcgm",
    "dcgm-exporter": "state-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "mig-manager": "state-mig-manager",
    "node-status-exporter": "state-node-status-exporter",
}
LOG_KEPT = 200
# The MIG manager's own words (reconfigure.go).
PAUSING = (
    "Shutting down all GPU clients in Kubernetes by disabling their component-specific "
    "nodeSelector labels"
)
RESTARTING = (
    "Restarting all GPU clients previously shutdown in Kubernetes by reenabling their "
    "component-specific nodeSelector labels"
)


def reconcile(cluster: Cluster) -> None:
    # Installed by the node agent through the API server once (``sandbox.nodes.agent``).
    if not cluster.store.meta_get("gpu_operator_installed"):
        return
    policy = cluster.store.get(CLUSTER_POLICY_KEY, "", CLUSTER_POLICY)
    spec = (policy or {}).get("spec") or {}
    mig_configs = _mig_configs(cluster, spec)
    plugin_configs = _plugin_configs(cluster, spec)
    for node in cluster.store.list("nodes"):
        if (node["metadata"].get("labels") or {}).get(GPU_PRESENT_LABEL) != "true":
            continue
        name = node["metadata"]["name"]
        if faults.node_down(cluster, name):
            continue  # its pods are frozen with its kubelet
        _device_plugin(cluster, name, spec, plugin_configs)
        _mig_manager(cluster, name, mig_configs)
    if policy is not None:
        _policy_status(cluster, policy)


# -- config maps ----------------------------------------------------------------------------------
def _config_map(cluster: Cluster, name: str) -> Obj | None:
    return cluster.store.get("configmaps", NAMESPACE, name) if name else None


def _mig_configs(cluster: Cluster, spec: dict[str, Any]) -> tuple[str, Any]:
    """(the ConfigMap's resourceVersion, its parsed layouts or the parse error's words)."""
    name = ((spec.get("migManager") or {}).get("config") or {}).get("name") or MIG_PARTED_CONFIG_MAP
    cm = _config_map(cluster, name)
    if cm is None:
        return "", f"configmap {name} not found"
    rv = cm["metadata"]["resourceVersion"]
    cache = cluster.settled.setdefault("gpu-operator", {})
    if cache.get("mig") and cache["mig"][0] == rv:
        return cache["mig"]
    try:
        parsed: Any = parse_mig_parted_config((cm.get("data") or {}).get(MIG_PARTED_KEY, ""))
    except ConfigError as exc:
        parsed = str(exc)
    cache["mig"] = (rv, parsed)
    return rv, parsed


def _plugin_configs(cluster: Cluster, spec: dict[str, Any]) -> dict[str, str]:
    name = ((spec.get("devicePlugin") or {}).get("config") or {}).get("name") or ""
    cm = _config_map(cluster, name)
    return dict((cm or {}).get("data") or {})


# -- the device plugin -----------------------------------------------------------------------------
def _chosen_config(label: str, default: str, configs: dict[str, str]) -> str | None:
    """The config manager's choice: the node's label, else the ClusterPolicy's default,
    else ``default``, else the only one; None when the label names none (it exits)."""
    if label:
        return label if label in configs else None
    for name in (default, DEFAULT_PLUGIN_CONFIG):
        if name in configs:
            return name
    return next(iter(configs)) if len(configs) == 1 else ""


def _device_plugin(
    cluster: Cluster, node: str, spec: dict[str, Any], configs: dict[str, str]
) -> None:
    state = cluster.store.meta_get(f"deviceplugin/{node}") or {}
    labels = _labels(cluster, node)
    default = ((spec.get("devicePlugin") or {}).get("config") or {}).get("default") or ""
    chosen = _chosen_config(labels.get(DEVICE_PLUGIN_CONFIG_LABEL, ""), default, configs)
    if chosen is None:
        return  # the config manager crash-loops; the plugin keeps what it runs
    text = configs.get(chosen, "")
    wanted = [chosen, text]
    if not state:  # what the plugin started with: the node as the profile built it
        cluster.store.meta_set(f"deviceplugin/{node}", {"running": wanted})
        return
    if state.get("running") == wanted:
        if state.get("restart_at") is not None:
            cluster.store.meta_set(f"deviceplugin/{node}", {"running": wanted})
        return
    if state.get("wanted") != wanted:  # the config manager sees a change: SIGHUP
        state = {**state, "wanted": wanted, "restart_at": cluster.now() + PLUGIN_RESTART_SECONDS}
        cluster.store.meta_set(f"deviceplugin/{node}", state)
        return
    if cluster.now() < float(state["restart_at"]):
        return
    try:
        sharing = parse_device_plugin_config(text) if text else TimeSlicing({})
    except ConfigError as exc:
        state = {**state, "error": str(exc), "running": wanted}
        cluster.store.meta_set(f"deviceplugin/{node}", state)
        return  # the plugin fails to start on it; what it advertised stays
    _relayout(cluster, node, layouts=_current_layouts(cluster.devices(node)), sharing=sharing)
    cluster.store.meta_set(f"deviceplugin/{node}", {"running": wanted, "sharing": _json(sharing)})


def _json(sharing: TimeSlicing) -> dict[str, Any]:
    return {"replicas": sharing.replicas, "rename": sharing.rename_by_default}


def _sharing(cluster: Cluster, node: str) -> TimeSlicing:
    """The time-slicing the node's plugin runs now (as the profile built it, until the
    plugin restarts on another config)."""
    state = (cluster.store.meta_get(f"deviceplugin/{node}") or {}).get("sharing")
    if state is not None:
        return TimeSlicing(dict(state["replicas"]), bool(state["rename"]))
    devices = cluster.devices(node)
    whole = next((d for d in devices if not d.mig_profile), None)
    if whole is None or whole.slots <= 1:
        return TimeSlicing({})
    return TimeSlicing({"nvidia.com/gpu": whole.slots}, whole.resource.endswith(".shared"))


# -- the MIG manager -------------------------------------------------------------------------------
def _current_layouts(devices: list[Device]) -> dict[int, GpuLayout]:
    layouts: dict[int, GpuLayout] = {}
    for dev in devices:
        if not dev.mig_profile:
            layouts.setdefault(dev.gpu, None)
            continue
        layout = layouts.get(dev.gpu) or {}
        layout[dev.mig_profile] = layout.get(dev.mig_profile, 0) + 1
        layouts[dev.gpu] = layout
    return layouts


def _mig_manager(cluster: Cluster, node: str, configs: tuple[str, Any]) -> None:
    labels = _labels(cluster, node)
    if labels.get(DEPLOY_LABEL_PREFIX + "mig-manager") in (None, "false"):
        return
    wanted = labels.get(MIG_CONFIG_LABEL, "")
    key = f"migmanager/{node}"
    state = cluster.store.meta_get(key) or {}
    if not state:  # the layout the node came with is the one applied
        cluster.store.meta_set(key, {"seen": wanted})
        return
    if state.get("target"):
        if cluster.now() >= float(state["since"]) + MIG_RECONFIGURE_SECONDS:
            _apply_layout(cluster, node, state, configs)
        return
    if not wanted or wanted == state.get("seen"):
        return
    _log(cluster, node, f"Updating to MIG config: {wanted}")
    layouts = configs[1]
    if isinstance(layouts, str) or wanted not in layouts:
        why = layouts if isinstance(layouts, str) else f"unknown config: {wanted}"
        _log(cluster, node, f"Error validating MIG config: {why}", "error")
        _set_state(cluster, node, "failed")
        cluster.store.meta_set(key, {"seen": wanted})
        return
    product, count = _product(labels), _gpu_count(labels)
    target = gpu_layouts(layouts[wanted], product, count)
    current = _current_layouts(cluster.devices(node))
    if all(current.get(i) == layout for i, layout in target.items()):
        _log(cluster, node, "MIG configuration already applied")
        _set_state(cluster, node, "success")
        cluster.store.meta_set(key, {"seen": wanted})
        return
    _log(cluster, node, "Changing the 'nvidia.com/mig.config.state' node label to 'pending'")
    _set_state(cluster, node, "pending")
    _log(
        cluster,
        node,
        PAUSING,
    )
    paused = _pause_clients(cluster, node)
    cluster.store.meta_set(
        key, {"seen": state.get("seen"), "target": wanted, "since": cluster.now(), "paused": paused}
    )


def _apply_layout(
    cluster: Cluster, node: str, state: dict[str, Any], configs: tuple[str, Any]
) -> None:
    wanted = str(state["target"])
    labels = _labels(cluster, node)
    layouts = configs[1]
    key = f"migmanager/{node}"
    failure = ""
    if isinstance(layouts, str) or wanted not in layouts:
        failure = f"unknown config: {wanted}"
    else:
        target = gpu_layouts(layouts[wanted], _product(labels), _gpu_count(labels))
        current = _current_layouts(cluster.devices(node))
        changing = {i for i, layout in target.items() if current.get(i) != layout}
        holders = _holders(cluster, node, changing)
        if holders:
            failure = (
                f"error applying MIG configuration: GPU {min(holders)} is in use by another "
                f"client ({holders[min(holders)]}); stop its processes first"
            )
    _log(cluster, node, "Applying the MIG mode change from the selected config to the node")
    if failure:
        _log(cluster, node, f"Error: {failure}", "error")
        _log(
            cluster,
            node,
            RESTARTING,
        )
        _restore_clients(cluster, node, dict(state.get("paused") or {}))
        _log(cluster, node, "Changing the 'nvidia.com/mig.config.state' node label to 'failed'")
        _set_state(cluster, node, "failed")
        cluster.store.meta_set(key, {"seen": wanted})
        return
    new = dict(current)
    new.update(target)
    _relayout(cluster, node, layouts=new, sharing=_sharing(cluster, node))
    _log(cluster, node, "Applying the selected MIG config to the node")
    _log(
        cluster,
        node,
        RESTARTING,
    )
    _restore_clients(cluster, node, dict(state.get("paused") or {}))
    _log(cluster, node, "Changing the 'nvidia.com/mig.config.state' node label to 'success'")
    _set_state(cluster, node, "success")
    _log(cluster, node, "Successfully updated to MIG config: " + wanted)
    cluster.store.meta_set(key, {"seen": wanted})


def _holders(cluster: Cluster, node: str, gpus: set[int]) -> dict[int, str]:
    """The GPUs of ``gpus`` a process holds: a pod that has not finished (``pod ns/name``)
    or a client on the host (a ``host_client`` fault)."""
    by_id = {d.id: d.gpu for d in cluster.devices(node)}
    held: dict[int, str] = {}
    for gpu in sorted(gpus):
        client = (faults.gpu_fault(cluster, node, gpu) or {}).get("host_client")
        if client:
            held[gpu] = f"process {client}"
    for pod in cluster.store.iter("pods"):
        if pod["spec"].get("nodeName") != node:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        meta = pod["metadata"]
        for dev in cluster.assignment(meta["uid"]):
            index = by_id.get(dev)
            if index is not None and index in gpus:
                held.setdefault(index, f"pod {meta['namespace']}/{meta['name']}")
    return held


def _pause_clients(cluster: Cluster, node: str) -> dict[str, str]:
    """Set the GPU clients' deploy labels to ``paused-for-mig-change`` (a ``false`` one
    stays); the values they had, to restore. The device plugin's resources go with it."""
    obj = cluster.store.get("nodes", "", node)
    assert obj is not None
    labels = obj["metadata"].setdefault("labels", {})
    before: dict[str, str] = {}
    for operand in PAUSED_BY_MIG_MANAGER:
        label = DEPLOY_LABEL_PREFIX + operand
        if label in labels:
            before[label] = labels[label]
            if labels[label] != "false":
                labels[label] = PAUSED_FOR_MIG_CHANGE
    allocatable = obj["status"].setdefault("allocatable", {})
    for resource in list(allocatable):
        if is_gpu_resource(resource):
            allocatable[resource] = "0"  # the kubelet drops a plugin that went away
    cluster.store.put("nodes", obj)
    return before


def _restore_clients(cluster: Cluster, node: str, before: dict[str, str]) -> None:
    obj = cluster.store.get("nodes", "", node)
    assert obj is not None
    labels = obj["metadata"].setdefault("labels", {})
    for label, value in before.items():
        labels[label] = "false" if value == "false" else "true"
    cluster.store.put("nodes", obj)
    _write_resources(cluster, node, cluster.devices(node))


# -- what the node offers --------------------------------------------------------------------------
def _relayout(
    cluster: Cluster, node: str, *, layouts: dict[int, GpuLayout], sharing: TimeSlicing
) -> None:
    """Rebuild the node's devices as ``layouts`` shared as ``sharing``; then its capacity,
    allocatable and GFD labels follow."""
    labels = _labels(cluster, node)
    product = _product(labels)
    devices = gpu_devices(
        node,
        cluster.options.seed,
        product=product,
        memory_mib=int(labels.get(GPU_MEMORY_LABEL, "0") or 0),
        count=_gpu_count(labels),
        layouts={i: layout for i, layout in layouts.items() if layout is not None},
        sharing=sharing,
    )
    cluster.store.meta_set(f"devices/{node}", [d.to_json() for d in devices])
    obj = cluster.store.get("nodes", "", node)
    assert obj is not None
    node_labels = obj["metadata"].setdefault("labels", {})
    for label in [k for k in node_labels if k.startswith("nvidia.com/mig-")]:
        del node_labels[label]
    node_labels.update(gfd_sharing_labels(product, devices, sharing))
    cluster.store.put("nodes", obj)
    _write_resources(cluster, node, devices)


def _write_resources(cluster: Cluster, node: str, devices: list[Device]) -> None:
    """Capacity: every device; allocatable: the healthy ones (the device plugin's view)."""
    obj = cluster.store.get("nodes", "", node)
    assert obj is not None
    status = obj["status"]
    capacity, allocatable = status.setdefault("capacity", {}), status.setdefault("allocatable", {})
    for resources in (capacity, allocatable):
        for resource in [r for r in resources if is_gpu_resource(r)]:
            del resources[resource]
    unhealthy = faults.unhealthy_devices(cluster, node)
    healthy = [d for d in devices if d.id not in unhealthy]
    for resource, count in device_resources(devices).items():
        capacity[resource] = str(count)
        allocatable[resource] = str(device_resources(healthy).get(resource, 0))
    cluster.store.put("nodes", obj)


# -- the ClusterPolicy's status ----------------------------------------------------------------
def _policy_status(cluster: Cluster, policy: Obj) -> None:
    """``ready`` while every operand pod runs Ready; else ``notReady`` naming the states."""
    not_ready: list[str] = []
    apps = {app: operand for operand, (app, _) in OPERAND_PODS.items()}
    for pod in cluster.store.list("pods", NAMESPACE):
        operand = apps.get((pod["metadata"].get("labels") or {}).get("app", ""))
        if operand is None:
            continue
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
        node = pod["spec"].get("nodeName", "")
        if not ready or faults.node_down(cluster, node):
            state = STATE_NAMES[operand]
            if state not in not_ready:
                not_ready.append(state)
    order = list(STATE_NAMES.values())
    not_ready.sort(key=order.index)
    previous = policy.get("status") or {}
    state = "notReady" if not_ready else "ready"
    now = cluster.timestamp()
    if not_ready:
        message = f"ClusterPolicy is not ready; states not ready: [{' '.join(not_ready)}]"
        conditions = [
            _condition("Ready", "False", "OperandNotReady", message, now),
            _condition("Error", "True", "OperandNotReady", message, now),
        ]
    else:
        conditions = [
            _condition(
                "Ready",
                "True",
                "Reconciled",
                "ClusterPolicy is ready as all resources have been successfully reconciled",
                now,
            ),
            _condition("Error", "False", "Ready", "", now),
        ]
    if previous.get("state") == state and _same(previous.get("conditions"), conditions):
        return
    policy["status"] = {"state": state, "namespace": NAMESPACE, "conditions": conditions}
    cluster.store.put(CLUSTER_POLICY_KEY, policy)


def _same(old: Any, new: list[dict[str, Any]]) -> bool:
    strip = lambda cs: [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []]  # noqa: E731
    return bool(strip(old) == strip(new))


def _condition(ctype: str, status: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": status,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


# -- small helpers ---------------------------------------------------------------------------------
def _labels(cluster: Cluster, node: str) -> dict[str, str]:
    obj = cluster.store.get("nodes", "", node) or {}
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _product(labels: dict[str, str]) -> str:
    return base_product(labels.get(GPU_PRODUCT_LABEL, ""))


def _gpu_count(labels: dict[str, str]) -> int:
    try:
        return int(labels.get(GPU_COUNT_LABEL, "0"))
    except ValueError:
        return 0


def _set_state(cluster: Cluster, node: str, state: str) -> None:
    obj = cluster.store.get("nodes", "", node)
    assert obj is not None
    labels = obj["metadata"].setdefault("labels", {})
    if labels.get(MIG_CONFIG_STATE_LABEL) != state:
        labels[MIG_CONFIG_STATE_LABEL] = state
        cluster.store.put("nodes", obj)


def _log(cluster: Cluster, node: str, text: str, level: str = "info") -> None:
    """A line of the node's MIG manager's log (its pod's log, through the API)."""
    lines = list(cluster.store.meta_get(f"miglog/{node}") or [])
    lines.append([cluster.now(), f'time="{cluster.timestamp()}" level={level} msg="{text}"'])
    cluster.store.meta_set(f"miglog/{node}", lines[-LOG_KEPT:])
