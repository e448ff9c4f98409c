"""The workspace images in the admin (the model is ``jobs.WorkspaceImage``: submission
checks a workspace's image, so the row lives where the apply pipeline reads it)."""

from __future__ import annotations

from django.contrib import admin

from jobs.models import WorkspaceImage


@admin.register(WorkspaceImage)
class WorkspaceImageAdmin(admin.ModelAdmin):
    """The workspace images users pick from (docs/workspaces.md): what each runs, on which
    port, and where its home folder is mounted. A disabled image is no longer offered;
    workspaces created from it keep running."""

    list_display = ["name", "title", "flavor", "image", "port", "home_path", "enabled"]
    list_filter = ["flavor", "enabled"]
    search_fields = ["name", "title", "image"]
