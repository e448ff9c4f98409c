from django.urls import path

from monitoring import apis, views

app_name = "monitoring"

urlpatterns = [
    path("", views.cluster_overview, name="cluster"),
    path("teams/<slug:slug>/", views.team_usage_page, name="team"),
    path("cohorts/<slug:slug>/", views.cohort_usage, name="cohort"),
    path("jobs/<int:job_id>/", views.job_gpus_page, name="job"),
    path("jobs/<int:job_id>/gpus/", views.job_gpus_partial, name="job-gpus"),
    path("reports/", views.reports, name="reports"),
]

api_urlpatterns = [
    path("monitoring/cluster/", apis.ClusterMonitoringApi.as_view(), name="api-monitoring-cluster"),
    path(
        "monitoring/teams/<slug:slug>/usage/",
        apis.TeamUsageApi.as_view(),
        name="api-monitoring-team-usage",
    ),
    path(
        "monitoring/jobs/<int:job_id>/gpus/",
        apis.JobGpusApi.as_view(),
        name="api-monitoring-job-gpus",
    ),
    path("monitoring/idle/", apis.IdleApi.as_view(), name="api-monitoring-idle"),
    path("reports/gpu-hours/", apis.GpuHoursReportApi.as_view(), name="api-reports-gpu-hours"),
]
