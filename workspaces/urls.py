"""The workspaces' pages (under /workspaces/; /workspaces/<id>/ itself is the proxy's) and
their API (under /api/v1/, with the other apps' in portal/urls.py). The names are global,
as the pages have always used them."""

from django.urls import path

from workspaces import apis, views

urlpatterns = [
    path("", views.workspace_list, name="workspaces"),
    path(
        "actions/<int:job_id>/stop/",
        views.workspace_stop_view,
        name="workspace-stop",
    ),
    path(
        "actions/<int:job_id>/start/",
        views.workspace_start_view,
        name="workspace-start",
    ),
    path(
        "actions/<int:job_id>/delete/",
        views.workspace_delete_view,
        name="workspace-delete",
    ),
    path("actions/<int:job_id>/panel/", views.workspace_panel, name="workspace-panel"),
]

api_urlpatterns = [
    path(
        "workspace-images/",
        apis.WorkspaceImageListApi.as_view(),
        name="api-workspace-images",
    ),
    path("workspaces/", apis.WorkspaceListCreateApi.as_view(), name="api-workspaces"),
    path(
        "workspaces/<int:job_id>/",
        apis.WorkspaceDetailApi.as_view(),
        name="api-workspace",
    ),
    path(
        "workspaces/<int:job_id>/stop/",
        apis.WorkspaceStopApi.as_view(),
        name="api-workspace-stop",
    ),
    path(
        "workspaces/<int:job_id>/start/",
        apis.WorkspaceStartApi.as_view(),
        name="api-workspace-start",
    ),
]
