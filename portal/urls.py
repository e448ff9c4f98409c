from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from cluster import apis as cluster_apis
from gpu_stack.urls import api_urlpatterns as gpu_stack_api_urls
from jobs import apis as job_apis
from jobs import views as job_views
from jobs.urls import api_urlpatterns as job_api_urls
from monitoring.urls import api_urlpatterns as monitoring_api_urls
from monitoring.views import metrics_view
from notifications import apis as notification_apis
from notifications import views as notification_views
from portal import probes, sso, views
from portal.exception_handler import api_not_found
from teams import apis as team_apis
from workspaces.urls import api_urlpatterns as workspace_api_urls

api_urls = [
    *job_api_urls,
    *gpu_stack_api_urls,
    *workspace_api_urls,
    *monitoring_api_urls,
    path("me/", team_apis.MeApi.as_view(), name="api-me"),
    path("teams/", job_apis.TeamListApi.as_view(), name="api-teams"),
    path("clusters/", cluster_apis.ClustersApi.as_view(), name="api-clusters"),
    path("cluster/nodes/", cluster_apis.ClusterNodesApi.as_view(), name="api-cluster-nodes"),
    path("cluster/gpu-operator/", cluster_apis.GpuOperatorApi.as_view(), name="api-gpu-operator"),
    path(
        "cluster/launchers/",
        cluster_apis.ClusterLaunchersApi.as_view(),
        name="api-cluster-launchers",
    ),
    path(
        "notifications/",
        notification_apis.NotificationSettingsApi.as_view(),
        name="api-notifications",
    ),
    path(
        "teams/<slug:slug>/notifications/",
        notification_apis.TeamNotificationSettingsApi.as_view(),
        name="api-team-notifications",
    ),
]

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="jobs:list", permanent=False), name="home"),
    path("jobs/", include("jobs.urls")),
    path("monitoring/", include("monitoring.urls")),
    path("gpu-stack/", include("gpu_stack.urls")),
    # /workspaces/<id>/ itself is the workspace proxy's (workspaces.proxy), never Django's.
    path("workspaces/", include("workspaces.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("teams/", job_views.team_list, name="teams"),
    path("settings/tokens/", views.api_tokens, name="api-tokens"),
    path(
        "settings/notifications/",
        notification_views.notification_settings,
        name="notification-settings",
    ),
    path("login/", sso.LoginView.as_view(), name="login"),
    path("logout/", sso.sso_logout, name="logout"),
    path("sso/login/", sso.sso_login, name="sso-login"),
    path("sso/callback/", sso.sso_callback, name="sso-callback"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    # Last: every other path under /api/ is a JSON 404, whatever DEBUG says.
    re_path(r"^api/(?P<path>.*)/$", api_not_found),
]

# JSON for unknown /api/ paths, the normal page elsewhere.
handler404 = "portal.exception_handler.not_found"
