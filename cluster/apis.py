"""REST API for the cluster itself: its GPU nodes and what is allocated on them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cluster.launchers import launchers_list
from cluster.nodes import cluster_gpu_nodes
from core.api_errors import error_responses


class ResourceUseOutput(serializers.Serializer):
    resource = serializers.CharField()
    allocatable = serializers.IntegerField()
    allocated = serializers.IntegerField()


class TaintOutput(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.CharField(allow_blank=True)
    effect = serializers.CharField()


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


class ClusterNodesApi(APIView):
    @extend_schema(
        operation_id="cluster_nodes",
        responses={200: GpuNodeOutput(many=True), **error_responses(401, 503)},
    )
    def get(self, request: Request) -> Response:
        return Response(GpuNodeOutput(cluster_gpu_nodes(), many=True).data)


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
