"""The platform admins' API for changing a node's GPU shape (docs/gpu-operator.md): preview a
MIG layout, start the change, follow it. Anyone else signed in gets 404."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from cluster.apis import GpuChangeOutput
from cluster.models import GpuChange
from core.api_errors import error_responses
from core.apis import ApiView, JsonBoolean, PlatformAdminOnly, QueryText
from core.errors import NotFound
from gpu_stack.selectors.changes import mig_preview
from gpu_stack.services import gpu_change_start, plugin_config_assign, plugin_config_save


class CapacityChangeOutput(serializers.Serializer):
    resource = serializers.CharField()
    before = serializers.IntegerField()
    after = serializers.IntegerField()
    delta = serializers.IntegerField(help_text="after - before: gained (+) or lost (-).")


class MovedJobOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    team = serializers.CharField()
    owner = serializers.CharField()
    gpus = serializers.DictField(child=serializers.IntegerField())


class MigPreviewOutput(serializers.Serializer):
    node = serializers.CharField()
    product = serializers.CharField()
    old_layout = serializers.CharField(allow_blank=True)
    new_layout = serializers.CharField()
    problem = serializers.CharField(
        allow_blank=True, help_text="Why the node cannot take the layout; empty: it can."
    )
    capacity = CapacityChangeOutput(many=True)
    jobs = MovedJobOutput(many=True, help_text="The portal's jobs the change moves (or waits for).")
    other_pods = serializers.ListField(
        child=serializers.CharField(),
        help_text="GPU pods the portal did not start: the change waits for them to go.",
    )


class MigPreviewQuery(serializers.Serializer):
    layout = QueryText(help_text="A layout of the MIG manager's config, e.g. all-1g.10gb.")


class MigChangeInput(serializers.Serializer):
    layout = serializers.CharField(help_text="A layout of the MIG manager's config.")
    displace = serializers.ChoiceField(
        choices=GpuChange.Displace.choices,
        default=GpuChange.Displace.EVICT,
        help_text="evict: move the jobs on the node away now (re-queued); wait: for them to "
        "finish.",
    )


class NodeMigLayoutApi(ApiView):
    permission_classes = [PlatformAdminOnly]
    query_input = MigPreviewQuery

    @extend_schema(
        operation_id="cluster_node_mig_layout_preview",
        responses={200: MigPreviewOutput, **error_responses(400, 401, 404, 503)},
    )
    def get(self, request: Request, node: str) -> Response:
        preview = mig_preview(node=node, layout=self.query["layout"])
        return Response(MigPreviewOutput(preview).data)

    @extend_schema(
        operation_id="cluster_node_mig_layout_change",
        request=MigChangeInput,
        responses={202: GpuChangeOutput, **error_responses(400, 401, 404, 409, 503)},
    )
    def post(self, request: Request, node: str) -> Response:
        data = MigChangeInput(data=request.data)
        data.is_valid(raise_exception=True)
        change = gpu_change_start(
            actor=request.user,  # type: ignore[arg-type]  # PlatformAdminOnly: signed in
            node=node,
            **data.validated_data,
        )
        return Response(GpuChangeOutput(change).data, status=status.HTTP_202_ACCEPTED)


class GpuChangeListApi(ApiView):
    permission_classes = [PlatformAdminOnly]

    @extend_schema(
        operation_id="cluster_gpu_changes",
        responses={200: GpuChangeOutput(many=True), **error_responses(401, 404)},
    )
    def get(self, request: Request) -> Response:
        changes = GpuChange.objects.select_related("requested_by")[:100]
        return Response(GpuChangeOutput(changes, many=True).data)


class GpuChangeApi(ApiView):
    permission_classes = [PlatformAdminOnly]

    @extend_schema(
        operation_id="cluster_gpu_change",
        responses={200: GpuChangeOutput, **error_responses(401, 404)},
    )
    def get(self, request: Request, change_id: int) -> Response:
        change = GpuChange.objects.select_related("requested_by").filter(pk=change_id).first()
        if change is None:
            raise NotFound(f"no GPU change {change_id}")
        return Response(GpuChangeOutput(change).data)


class DevicePluginConfigInput(serializers.Serializer):
    replicas = serializers.IntegerField(
        min_value=1, help_text="Time-slicing replicas of each GPU (nvidia.com/gpu); 1: no sharing."
    )
    rename_by_default = JsonBoolean(
        default=True,
        help_text="Advertise shared GPUs as nvidia.com/gpu.shared (renameByDefault).",
    )


class DevicePluginConfigApi(ApiView):
    permission_classes = [PlatformAdminOnly]

    @extend_schema(
        operation_id="cluster_device_plugin_config_save",
        request=DevicePluginConfigInput,
        responses={202: GpuChangeOutput(many=True), **error_responses(400, 401, 404, 409, 503)},
    )
    def put(self, request: Request, name: str) -> Response:
        """Write a named device plugin config; the nodes running it restart with it (one
        change each, followed to the new allocatable)."""
        data = DevicePluginConfigInput(data=request.data)
        data.is_valid(raise_exception=True)
        changes = plugin_config_save(
            actor=request.user,  # type: ignore[arg-type]  # PlatformAdminOnly: signed in
            name=name,
            **data.validated_data,
        )
        return Response(GpuChangeOutput(changes, many=True).data, status=status.HTTP_202_ACCEPTED)


class NodeDevicePluginConfigInput(serializers.Serializer):
    config = serializers.CharField(help_text="A named config of the device plugin's ConfigMap.")


class NodeDevicePluginConfigApi(ApiView):
    permission_classes = [PlatformAdminOnly]

    @extend_schema(
        operation_id="cluster_node_device_plugin_config",
        request=NodeDevicePluginConfigInput,
        responses={202: GpuChangeOutput, **error_responses(400, 401, 404, 409, 503)},
    )
    def post(self, request: Request, node: str) -> Response:
        """Make the node's device plugin run another named config (its label)."""
        data = NodeDevicePluginConfigInput(data=request.data)
        data.is_valid(raise_exception=True)
        change = plugin_config_assign(
            actor=request.user,  # type: ignore[arg-type]  # PlatformAdminOnly: signed in
            node=node,
            config=data.validated_data["config"],
        )
        return Response(GpuChangeOutput(change).data, status=status.HTTP_202_ACCEPTED)
