"""The GPU catalog in the admin console: products, MIG profiles and the catalog settings."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from cluster.models import CatalogSettings, Cluster, GpuProduct, MigProfile


@admin.register(GpuProduct)
class GpuProductAdmin(admin.ModelAdmin):
    list_display = ["name", "memory_mib", "gpus_per_node", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name"]


@admin.register(MigProfile)
class MigProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "memory_gib", "max_per_node", "enabled"]
    list_filter = ["enabled"]


@admin.register(CatalogSettings)
class CatalogSettingsAdmin(admin.ModelAdmin):
    list_display = ["__str__", "shared_gpu_resource", "max_shared_per_node"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not CatalogSettings.objects.exists()


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "state", "access", "region", "prometheus_url", "unreachable_since"]
    list_filter = ["state", "access", "region"]
    search_fields = ["name", "region"]
    readonly_fields = ["unreachable_since", "last_error", "created_at"]
