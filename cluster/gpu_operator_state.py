"""Reads of NVIDIA's GPU Operator: its ClusterPolicy, the configs its MIG manager and device
plugin apply, and what it says about each GPU node (labels and its operands' pods).

The formats are parsed by the scheduling core (``scheduling.gpu_operator_config``), the same
reading the sandbox's operator applies. A cluster without the operator reads as
``installed=False``; the pages say so rather than fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cluster import kube
from cluster.models import GpuChange
from cluster.nodes import GpuNode, cluster_error_text, cluster_gpu_nodes
from core.errors import ClusterUnavailable
from scheduling.gpu_operator_config import (
    DEPLOY_LABEL_PREFIX,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_PRESENT_LABEL,
    MIG_CAPABLE_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_STRATEGY_LABEL,
    OPERANDS,
    ConfigError,
    MigEntry,
    TimeSlicing,
    parse_device_plugin_config,
    parse_mig_parted_config,
)

CLUSTER_POLICY_NAME = "cluster-policy"
DEFAULT_NAMESPACE = "gpu-operator"
MIG_PARTED_KEY = "config.yaml"
# The app label of each operand's DaemonSet pods (gpu-operator's assets/state-*).
OPERAND_APPS: dict[str, str] = {
    "driver": "nvidia-driver-daemonset",
    "container-toolkit": "nvidia-container-toolkit-daemonset",
    "operator-validator": "nvidia-operator-validator",
    "device-plugin": "nvidia-device-plugin-daemonset",
    "dcgm": "nvidia-dcgm",
    "dcgm-exporter": "nvidia-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "mig-manager": "nvidia-mig-manager",
    "node-status-exporter": "nvidia-node-status-exporter",
}


@dataclass(frozen=True)
class ClusterPolicyState:
    """The ClusterPolicy's ``status``: ``ready``, ``notReady`` (``message`` names the
    operator's states not ready), or ``absent`` when the cluster has no GPU Operator."""

    name: str
    state: str
    message: str
    namespace: str
    mig_config_map: str
    plugin_config_map: str
    plugin_default: str

    @property
    def installed(self) -> bool:
        return self.state != "absent"

    def plugin_config_for(self, label: str) -> str:
        """The device plugin config a node runs: its ``nvidia.com/device-plugin.config``
        label, else the ClusterPolicy's default, else ``default``."""
        return label or self.plugin_default or "default"


@dataclass(frozen=True)
class Operand:
    """One operand on one node: its deploy label (``true``, ``false``,
    ``paused-for-mig-change``), its pod and whether that pod is Ready."""

    name: str
    deploy: str
    pod: str
    ready: bool


@dataclass(frozen=True)
class NodeOperator:
    """What the operator and GFD say about one GPU node."""

    gpu_present: bool
    operands: list[Operand]
    mig_capable: bool
    mig_strategy: str
    mig_config: str
    mig_config_state: str
    device_plugin_config: str  # the label; empty: the ClusterPolicy's default

    def operand(self, name: str) -> Operand | None:
        return next((o for o in self.operands if o.name == name), None)

    @property
    def operands_unready(self) -> list[Operand]:
        """The operands not running Ready (paused, turned off or failing)."""
        return [o for o in self.operands if not (o.deploy == "true" and o.ready)]

    @property
    def driver_ready(self) -> bool:
        return _ready(self.operand("driver"))

    @property
    def device_plugin_ready(self) -> bool:
        return _ready(self.operand("device-plugin"))


def _ready(operand: Operand | None) -> bool:
    return operand is not None and operand.deploy == "true" and operand.ready


@dataclass(frozen=True)
class GpuOperator:
    """The operator's ClusterPolicy and the configs it applies (each parsed, or the words
    of why it does not parse)."""

    policy: ClusterPolicyState
    mig_layouts: dict[str, list[MigEntry]] = field(default_factory=dict)
    mig_layouts_error: str = ""
    plugin_configs: dict[str, TimeSlicing] = field(default_factory=dict)
    plugin_config_errors: dict[str, str] = field(default_factory=dict)


ABSENT = ClusterPolicyState(CLUSTER_POLICY_NAME, "absent", "", DEFAULT_NAMESPACE, "", "", "")


def cluster_policy() -> ClusterPolicyState:
    """The cluster's ClusterPolicy (the operator acts on the oldest one). Raises
    ``kube.ClusterError`` when the cluster cannot be read."""
    try:
        policies = sorted(
            kube.list_all("ClusterPolicy"),
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]),
        )
    except kube.ObjectNotFound:  # the CRD is not served: no operator
        return ABSENT
    if not policies:
        return ABSENT
    policy = policies[0]
    spec, status = policy.get("spec") or {}, policy.get("status") or {}
    plugin = (spec.get("devicePlugin") or {}).get("config") or {}
    mig = (spec.get("migManager") or {}).get("config") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    message = ""
    if status.get("state") != "ready":
        message = (conditions.get("Error") or conditions.get("Ready") or {}).get("message", "")
    return ClusterPolicyState(
        name=policy["metadata"]["name"],
        state=str(status.get("state") or "notReady"),
        message=str(message),
        namespace=str(status.get("namespace") or DEFAULT_NAMESPACE),
        mig_config_map=str(mig.get("name") or "default-mig-parted-config"),
        plugin_config_map=str(plugin.get("name") or ""),
        plugin_default=str(plugin.get("default") or ""),
    )


def _config_map_data(name: str, namespace: str) -> dict[str, str] | None:
    if not name:
        return None
    try:
        return dict(kube.get("ConfigMap", name, namespace).get("data") or {})
    except kube.ObjectNotFound:
        return None


def gpu_operator() -> GpuOperator:
    """The ClusterPolicy and its MIG manager's and device plugin's configs. Raises
    ``kube.ClusterError`` when the cluster cannot be read."""
    policy = cluster_policy()
    if not policy.installed:
        return GpuOperator(policy)
    layouts: dict[str, list[MigEntry]] = {}
    layouts_error = ""
    data = _config_map_data(policy.mig_config_map, policy.namespace)
    if data is None:
        layouts_error = f"ConfigMap {policy.namespace}/{policy.mig_config_map} not found"
    else:
        try:
            layouts = parse_mig_parted_config(data.get(MIG_PARTED_KEY, ""))
        except ConfigError as exc:
            layouts_error = f"{policy.mig_config_map}: {exc}"
    configs: dict[str, TimeSlicing] = {}
    errors: dict[str, str] = {}
    for name, text in (_config_map_data(policy.plugin_config_map, policy.namespace) or {}).items():
        try:
            configs[name] = parse_device_plugin_config(text)
        except ConfigError as exc:
            errors[name] = str(exc)
    return GpuOperator(policy, layouts, layouts_error, configs, errors)


def operand_pods(namespace: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The operator's operand pods by (node, app label). Raises ``kube.ClusterError``."""
    pods: dict[tuple[str, str], dict[str, Any]] = {}
    for pod in kube.list_all("Pod", namespace=namespace):
        app = (pod["metadata"].get("labels") or {}).get("app", "")
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if app and node and not pod["metadata"].get("deletionTimestamp"):
            pods[(node, app)] = pod
    return pods


def node_operator(
    name: str, labels: dict[str, str], pods: dict[tuple[str, str], dict[str, Any]]
) -> NodeOperator:
    """What the operator's labels and its operands' pods say about node ``name``."""
    operands = []
    for operand in OPERANDS:
        deploy = labels.get(DEPLOY_LABEL_PREFIX + operand)
        if deploy is None:
            continue
        pod = pods.get((name, OPERAND_APPS[operand]))
        operands.append(
            Operand(
                name=operand,
                deploy=deploy,
                pod=pod["metadata"]["name"] if pod else "",
                ready=bool(pod) and _pod_ready(pod or {}),
            )
        )
    return NodeOperator(
        gpu_present=labels.get(GPU_PRESENT_LABEL) == "true",
        operands=operands,
        mig_capable=labels.get(MIG_CAPABLE_LABEL) == "true",
        mig_strategy=labels.get(MIG_STRATEGY_LABEL, ""),
        mig_config=labels.get(MIG_CONFIG_LABEL, ""),
        mig_config_state=labels.get(MIG_CONFIG_STATE_LABEL, ""),
        device_plugin_config=labels.get(DEVICE_PLUGIN_CONFIG_LABEL, ""),
    )


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def mig_manager_reason(node: str, namespace: str) -> str:
    """The MIG manager's last error on ``node``, from its pod's log (where the real one
    reports it: it writes no events); empty when it logged none."""
    pods = operand_pods(namespace)
    pod = pods.get((node, OPERAND_APPS["mig-manager"]))
    if pod is None:
        return ""
    text = kube.pod_log(pod["metadata"]["name"], namespace, tail_lines=50)
    errors = [line for line in text.splitlines() if "level=error" in line]
    if not errors:
        return ""
    line = errors[-1]
    start = line.find('msg="')
    return line[start + 5 : -1] if start >= 0 and line.endswith('"') else line


@dataclass(frozen=True)
class OperatorNode:
    """A GPU node with what the operator says about it, the device plugin config it runs
    and the portal's change under way on it."""

    node: GpuNode
    operator: NodeOperator
    plugin_config: str  # the config in force: its label's, else the ClusterPolicy's default
    time_slicing: TimeSlicing | None  # None: the config is not in the ConfigMap
    change: GpuChange | None


def gpu_nodes_operator() -> tuple[GpuOperator, list[OperatorNode]]:
    """The operator and every GPU node as it sees them. Raises ``ClusterUnavailable``."""
    nodes = cluster_gpu_nodes()
    try:
        operator = gpu_operator()
        pods = operand_pods(operator.policy.namespace) if operator.policy.installed else {}
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc
    changes = {c.node: c for c in GpuChange.objects.filter(phase__in=GpuChange.ACTIVE)}
    result = []
    for node in nodes:
        state = node_operator(node.name, node.labels, pods)
        config = operator.policy.plugin_config_for(state.device_plugin_config)
        sharing = operator.plugin_configs.get(config)
        if sharing is None and not operator.plugin_configs:
            sharing = TimeSlicing({})  # no named configs: the plugin runs its defaults
        result.append(OperatorNode(node, state, config, sharing, changes.get(node.name)))
    return operator, result
