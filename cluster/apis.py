"""REST API for the clusters: which there are, their GPU nodes and what is allocated on them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cluster.gpu_operator_state import GpuOperator, OperatorNode, gpu_nodes_operator
from cluster.launchers import launchers_list
from cluster.nodes import ResourceUse
from cluster.selectors import clusters_list
from core.api_errors import error_responses
from core.apis import PlatformAdminOnly


class ResourceUseOutput(serializers.Serializer):
    resource = serializers.CharField()
    allocatable = serializers.IntegerField()
    allocated = serializers.IntegerField()


class TaintOutput(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.CharField(allow_blank=True)
    effect = serializers.CharField()


class OperandOutput(serializers.Serializer):
    name = serializers.CharField(help_text="The operand: driver, device-plugin, mig-manager, ...")
    deploy = serializers.CharField(
        help_text="Its nvidia.com/gpu.deploy.<name> label: true, false or paused-for-mig-change."
    )
    pod = serializers.CharField(allow_blank=True, help_text="Its pod on the node; empty: none.")
    ready = serializers.BooleanField(help_text="The pod is Ready.")


class TimeSlicingOutput(serializers.Serializer):
    replicas = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Time-slicing replicas per resource (sharing.timeSlicing.resources); empty: "
        "no sharing.",
    )
    rename_by_default = serializers.BooleanField(
        help_text="renameByDefault: shared GPUs are advertised as nvidia.com/gpu.shared."
    )


class GpuChangeOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField(help_text="mig or time-slicing.")
    old_value = serializers.CharField(allow_blank=True)
    new_value = serializers.CharField()
    displace = serializers.CharField(help_text="evict or wait.")
    phase = serializers.CharField(help_text="draining, applying, succeeded or failed.")
    message = serializers.CharField(allow_blank=True)
    requested_by = serializers.CharField(source="requested_by.username", default="")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class GpuNodeOutput(serializers.Serializer):
    name = serializers.CharField()
    gpu_product = serializers.CharField(
        allow_blank=True, help_text="The node's nvidia.com/gpu.product label."
    )
    gpus_allocatable = serializers.IntegerField(help_text="Allocatable nvidia.com/gpu.")
    gpus_allocated = serializers.IntegerField(
        help_text="nvidia.com/gpu requested by bound pods that are not Succeeded/Failed."
    )
    mig = ResourceUseOutput(many=True, help_text="nvidia.com/mig-<profile> resources.")
    shared = ResourceUseOutput(allow_null=True, help_text="nvidia.com/gpu.shared (time-slicing).")
    taints = TaintOutput(many=True)
    unschedulable = serializers.BooleanField()
    gpu_resources = ResourceUseOutput(
        many=True, help_text="Every GPU resource the node offers: allocatable and held."
    )
    gpu_present = serializers.BooleanField(help_text="The operator's nvidia.com/gpu.present.")
    operands = OperandOutput(many=True, help_text="The GPU Operator's operands on the node.")
    driver_ready = serializers.BooleanField(help_text="The driver operand runs and is Ready.")
    device_plugin_ready = serializers.BooleanField(
        help_text="The device plugin operand runs and is Ready."
    )
    mig_capable = serializers.BooleanField(help_text="nvidia.com/mig.capable.")
    mig_strategy = serializers.CharField(allow_blank=True, help_text="nvidia.com/mig.strategy.")
    mig_config = serializers.CharField(
        allow_blank=True, help_text="nvidia.com/mig.config: the MIG layout asked for."
    )
    mig_config_state = serializers.CharField(
        allow_blank=True,
        help_text="nvidia.com/mig.config.state: pending, rebooting, success or failed.",
    )
    device_plugin_config = serializers.CharField(
        help_text="The device plugin config in force: nvidia.com/device-plugin.config, else "
        "the ClusterPolicy's default."
    )
    time_slicing = TimeSlicingOutput(
        allow_null=True, help_text="That config's time-slicing; null: not in the ConfigMap."
    )
    gpu_change = GpuChangeOutput(
        allow_null=True, help_text="The portal's change of this node under way, if any."
    )


def _node_row(entry: OperatorNode) -> dict[str, Any]:
    node, operator = entry.node, entry.operator
    resources = [
        *(
            [ResourceUse("nvidia.com/gpu", node.gpus_allocatable, node.gpus_allocated)]
            if node.gpus_allocatable or node.gpus_allocated
            else []
        ),
        *node.mig,
        *([node.shared] if node.shared else []),
    ]
    return {
        **node.__dict__,
        "gpu_resources": resources,
        "gpu_present": operator.gpu_present,
        "operands": operator.operands,
        "driver_ready": operator.driver_ready,
        "device_plugin_ready": operator.device_plugin_ready,
        "mig_capable": operator.mig_capable,
        "mig_strategy": operator.mig_strategy,
        "mig_config": operator.mig_config,
        "mig_config_state": operator.mig_config_state,
        "device_plugin_config": entry.plugin_config,
        "time_slicing": (
            {
                "replicas": entry.time_slicing.replicas,
                "rename_by_default": entry.time_slicing.rename_by_default,
            }
            if entry.time_slicing is not None
            else None
        ),
        "gpu_change": entry.change,
    }


class ClusterNodesApi(APIView):
    @extend_schema(
        operation_id="cluster_nodes",
        responses={200: GpuNodeOutput(many=True), **error_responses(401, 503)},
    )
    def get(self, request: Request) -> Response:
        _, nodes = gpu_nodes_operator()
        return Response(GpuNodeOutput([_node_row(n) for n in nodes], many=True).data)


class LauncherOutput(serializers.Serializer):
    name = serializers.CharField(help_text="The training spec's `launcher` value.")
    kind = serializers.CharField(help_text="The object the portal creates for the job.")
    api = serializers.CharField(help_text="Its API group/version.")
    served = serializers.BooleanField(help_text="The cluster serves that API.")
    enabled = serializers.BooleanField(help_text="The admin enabled it (TRAINING_LAUNCHERS).")
    offered = serializers.BooleanField(
        help_text="A training job may use it now: enabled, served, built by the portal and, "
        "on Kueue, managed by Kueue."
    )
    default = serializers.BooleanField(help_text="Used when a spec names no launcher.")


class ClusterLaunchersApi(APIView):
    @extend_schema(
        operation_id="cluster_launchers",
        responses={200: LauncherOutput(many=True), **error_responses(401, 503)},
    )
    def get(self, request: Request) -> Response:
        return Response(LauncherOutput(launchers_list(), many=True).data)


class ClusterPolicyOutput(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.CharField(help_text="ready, notReady, or absent (no GPU Operator).")
    message = serializers.CharField(
        allow_blank=True, help_text="When not ready: the operator's states that are not."
    )
    namespace = serializers.CharField(help_text="The operator's namespace.")
    mig_config_map = serializers.CharField(help_text="The MIG manager's mig-parted ConfigMap.")
    plugin_config_map = serializers.CharField(
        allow_blank=True, help_text="The device plugin's ConfigMap of named configs."
    )
    plugin_default = serializers.CharField(
        allow_blank=True, help_text="The config a node without a label runs."
    )


class MigLayoutOutput(serializers.Serializer):
    name = serializers.CharField(
        help_text="A key of mig-configs: the value of nvidia.com/mig.config."
    )
    entries = serializers.ListField(
        child=serializers.DictField(),
        help_text="Its entries: devices (all or GPU indexes), device_filter (PCI ids), "
        "mig_enabled, mig_devices (profile → count).",
    )


class DevicePluginConfigOutput(serializers.Serializer):
    name = serializers.CharField(
        help_text="A key of the ConfigMap: nvidia.com/device-plugin.config."
    )
    replicas = serializers.DictField(child=serializers.IntegerField())
    rename_by_default = serializers.BooleanField()
    error = serializers.CharField(
        allow_blank=True, help_text="Why it does not parse; empty: it does."
    )


class GpuOperatorOutput(serializers.Serializer):
    cluster_policy = ClusterPolicyOutput()
    mig_layouts = MigLayoutOutput(many=True)
    mig_layouts_error = serializers.CharField(allow_blank=True)
    device_plugin_configs = DevicePluginConfigOutput(many=True)


def gpu_operator_row(operator: GpuOperator) -> dict[str, Any]:
    configs = [
        {"name": n, "replicas": c.replicas, "rename_by_default": c.rename_by_default, "error": ""}
        for n, c in sorted(operator.plugin_configs.items())
    ] + [
        {"name": n, "replicas": {}, "rename_by_default": False, "error": e}
        for n, e in sorted(operator.plugin_config_errors.items())
    ]
    return {
        "cluster_policy": operator.policy,
        "mig_layouts": [
            {
                "name": name,
                "entries": [
                    {
                        "devices": "all" if e.devices is None else list(e.devices),
                        "device_filter": list(e.device_filter),
                        "mig_enabled": e.mig_enabled,
                        "mig_devices": e.mig_devices,
                    }
                    for e in entries
                ],
            }
            for name, entries in operator.mig_layouts.items()
        ],
        "mig_layouts_error": operator.mig_layouts_error,
        "device_plugin_configs": configs,
    }


class GpuOperatorApi(APIView):
    permission_classes = [PlatformAdminOnly]

    @extend_schema(
        operation_id="cluster_gpu_operator",
        responses={200: GpuOperatorOutput, **error_responses(401, 404, 503)},
    )
    def get(self, request: Request) -> Response:
        operator, _ = gpu_nodes_operator()
        return Response(GpuOperatorOutput(gpu_operator_row(operator)).data)


class RegisteredClusterOutput(serializers.Serializer):
    name = serializers.CharField(help_text="What a job's spec names in its 'cluster' field.")
    state = serializers.CharField(
        help_text="enabled; draining (runs what it has, takes no new work); disabled."
    )
    region = serializers.CharField(allow_blank=True)
    takes_new_work = serializers.BooleanField()
    unreachable_since = serializers.DateTimeField(
        allow_null=True, help_text="Since when its API server has not answered the portal."
    )


class ClustersApi(APIView):
    @extend_schema(
        operation_id="clusters_list",
        responses={200: RegisteredClusterOutput(many=True), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        """The clusters a job may name in its spec's ``cluster`` (or ``any``)."""
        return Response(RegisteredClusterOutput(clusters_list(), many=True).data)
