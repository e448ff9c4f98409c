"""The GPU stack's page (under /gpu-stack/) and its API (under /api/v1/cluster/, with the
other apps' in portal/urls.py); platform admins only. The names are global, as the pages
have always used them."""

from django.urls import path

from gpu_stack import apis, views

urlpatterns = [
    path("", views.gpu_stack, name="gpu-stack"),
    path("mig/", views.mig_change, name="gpu-stack-mig"),
    path(
        "device-plugin/",
        views.device_plugin_config,
        name="gpu-stack-device-plugin",
    ),
    path(
        "device-plugin/assign/",
        views.device_plugin_assign,
        name="gpu-stack-device-plugin-assign",
    ),
]

api_urlpatterns = [
    path(
        "cluster/nodes/<str:node>/mig-layout/",
        apis.NodeMigLayoutApi.as_view(),
        name="api-node-mig-layout",
    ),
    path(
        "cluster/nodes/<str:node>/device-plugin-config/",
        apis.NodeDevicePluginConfigApi.as_view(),
        name="api-node-device-plugin-config",
    ),
    path(
        "cluster/device-plugin-configs/<str:name>/",
        apis.DevicePluginConfigApi.as_view(),
        name="api-device-plugin-config",
    ),
    path("cluster/gpu-changes/", apis.GpuChangeListApi.as_view(), name="api-gpu-changes"),
    path(
        "cluster/gpu-changes/<int:change_id>/",
        apis.GpuChangeApi.as_view(),
        name="api-gpu-change",
    ),
]
