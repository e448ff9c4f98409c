"""NVIDIA's GPU Operator as a cluster that runs it shows it: its namespace, the
``cluster-policy`` ClusterPolicy, the MIG manager's mig-parted config and the device plugin's
named configs (ConfigMaps the operator reads), which the node agent installs through the
API once on a fresh cluster (``sandbox.nodes.agent``).

The operator's controllers (status, MIG manager, device plugin reload) are in
``sandbox.nodes.gpu_operands``; the node labels it and GFD write come with the nodes
(``sandbox.profiles``).
"""

from __future__ import annotations

from typing import Any

import yaml

from sandbox.profiles import pool_mig_config, pool_plugin_config
from scheduling.gpu_operator_config import (
    DEPLOY_LABEL_PREFIX,
    GPU_MODELS,
    OPERANDS,
    TimeSlicing,
    device_plugin_config_text,
)

NAMESPACE = "gpu-operator"
CLUSTER_POLICY = "cluster-policy"
CLUSTER_POLICY_KEY = "clusterpolicies.nvidia.com"
MIG_PARTED_CONFIG_MAP = "default-mig-parted-config"
MIG_PARTED_KEY = "config.yaml"
DEVICE_PLUGIN_CONFIG_MAP = "time-slicing-config"
DEFAULT_PLUGIN_CONFIG = "default"
OPERATOR_VERSION = "v25.3.0"
# The operands' DaemonSets: pod name prefix (and app label), image.
OPERAND_PODS: dict[str, tuple[str, str]] = {
    "driver": ("nvidia-driver-daemonset", "nvcr.io/nvidia/driver:550.54.15"),
    "container-toolkit": (
        "nvidia-container-toolkit-daemonset",
        "nvcr.io/nvidia/k8s/container-toolkit:v1.17.5",
    ),
    "operator-validator": (
        "nvidia-operator-validator",
        "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.0",
    ),
    "device-plugin": ("nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"),
    "dcgm": ("nvidia-dcgm", "nvcr.io/nvidia/cloud-native/dcgm:4.1.1-2-ubuntu22.04"),
    "dcgm-exporter": (
        "nvidia-dcgm-exporter",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1-4.0.4-ubuntu22.04",
    ),
    "gpu-feature-discovery": ("gpu-feature-discovery", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"),
    "mig-manager": (
        "nvidia-mig-manager",
        "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1-ubuntu20.04",
    ),
    "node-status-exporter": (
        "nvidia-node-status-exporter",
        "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.0",
    ),
}

# The PCI device ids mig-parted's shipped config filters on (gpu-operator's
# assets/state-mig-manager/0400_configmap.yaml): the 80 GB and 40 GB MIG families.
_FAMILY_80GB = [
    "0x233010DE",
    "0x233110DE",
    "0x232210DE",
    "0x20B210DE",
    "0x20B510DE",
    "0x20F310DE",
    "0x20F510DE",
    "0x232410DE",
]
_FAMILY_40GB = ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
_BALANCED = {
    "80": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "40": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
}


def _families() -> dict[str, tuple[list[str], dict[str, int]]]:
    """Each MIG family's device filter and its profiles' largest counts on one GPU."""
    shapes_80 = GPU_MODELS["NVIDIA-A100-SXM4-80GB"].mig
    shapes_40 = GPU_MODELS["NVIDIA-A100-SXM4-40GB"].mig
    return {
        "80": (_FAMILY_80GB, {p: s.max_count for p, s in shapes_80.items()}),
        "40": (_FAMILY_40GB, {p: s.max_count for p, s in shapes_40.items()}),
    }


def standard_mig_configs() -> dict[str, list[dict[str, Any]]]:
    """The layouts mig-parted's shipped config names: all-disabled, all-enabled, one
    ``all-<profile>`` per profile (the most one GPU holds) and ``all-balanced``."""
    configs: dict[str, list[dict[str, Any]]] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    for family, (device_filter, counts) in _families().items():
        for profile, count in counts.items():
            configs.setdefault(f"all-{profile}", []).append(
                {
                    "device-filter": device_filter,
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {profile: count},
                }
            )
        configs.setdefault("all-balanced", []).append(
            {
                "device-filter": device_filter,
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": dict(_BALANCED[family]),
            }
        )
    return configs


def mig_parted_config_text(profile: dict[str, Any]) -> str:
    """The MIG manager's config: the shipped layouts and each pool's own layout."""
    configs = standard_mig_configs()
    for pool in profile.get("pools", []):
        own = pool_mig_config(pool)
        if own:
            configs[own[0]] = own[1]
    return yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)


def device_plugin_configs(profile: dict[str, Any]) -> dict[str, str]:
    """The device plugin's named configs: ``default`` (no sharing) and each time-sliced
    pool's."""
    configs = {DEFAULT_PLUGIN_CONFIG: device_plugin_config_text(TimeSlicing({}))}
    for pool in profile.get("pools", []):
        own = pool_plugin_config(pool)
        if own:
            configs[own[0]] = device_plugin_config_text(own[1])
    return configs


def cluster_policy() -> dict[str, Any]:
    """The ClusterPolicy the operator's Helm chart creates, with the MIG manager and the
    device plugin reading the ConfigMaps above and the ``mixed`` MIG strategy."""
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": CLUSTER_POLICY,
            "labels": {"app.kubernetes.io/component": "gpu-operator"},
        },
        "spec": {
            "operator": {"defaultRuntime": "containerd"},
            # Every operand DaemonSet's common settings (the chart's ``daemonsets`` values;
            # the CRD requires the section).
            "daemonsets": {
                "priorityClassName": "system-node-critical",
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
            "driver": {"enabled": True, "version": "550.54.15"},
            "toolkit": {"enabled": True},
            "devicePlugin": {
                "enabled": True,
                "config": {"name": DEVICE_PLUGIN_CONFIG_MAP, "default": DEFAULT_PLUGIN_CONFIG},
            },
            "dcgm": {"enabled": True},
            "dcgmExporter": {"enabled": True},
            "gfd": {"enabled": True},
            "mig": {"strategy": "mixed"},
            "migManager": {
                "enabled": True,
                "config": {"name": MIG_PARTED_CONFIG_MAP, "default": "all-disabled"},
            },
            "nodeStatusExporter": {"enabled": True},
            "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}},
        },
    }


def operand_daemonset(operand: str) -> dict[str, Any]:
    """The DaemonSet the operator runs for ``operand``: on the nodes whose
    ``nvidia.com/gpu.deploy.<operand>`` label is ``true``."""
    app, image = OPERAND_PODS[operand]
    labels = {"app": app, "app.kubernetes.io/part-of": "gpu-operator"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": app, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {DEPLOY_LABEL_PREFIX + operand: "true"},
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": app.removesuffix("-daemonset"),
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "containers": [{"name": app.removesuffix("-daemonset"), "image": image}],
                },
            },
        },
    }


def operator_objects(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """What ``helm install gpu-operator`` leaves on a fresh cluster, in the order to create
    it: the namespace, the operands' service accounts, the MIG manager's and the device
    plugin's ConfigMaps, the operands' DaemonSets, and last the ClusterPolicy (its presence
    says the install is done)."""
    part_of = {"app.kubernetes.io/part-of": "gpu-operator"}
    config_maps = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": part_of},
            "data": data,
        }
        for name, data in (
            (MIG_PARTED_CONFIG_MAP, {MIG_PARTED_KEY: mig_parted_config_text(profile)}),
            (DEVICE_PLUGIN_CONFIG_MAP, device_plugin_configs(profile)),
        )
    ]
    service_accounts = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": app.removesuffix("-daemonset"), "namespace": NAMESPACE},
        }
        for app, _ in OPERAND_PODS.values()
    ]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *service_accounts,
        *config_maps,
        *(operand_daemonset(operand) for operand in OPERANDS),
        cluster_policy(),
    ]
