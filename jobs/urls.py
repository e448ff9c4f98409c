from django.urls import path

from jobs import apis, views

app_name = "jobs"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_new, name="new"),
    path("new/preview/", views.job_preview_partial, name="preview"),
    path("<int:job_id>/", views.job_detail, name="detail"),
    path("<int:job_id>/clone/", views.job_clone, name="clone"),
    path("<int:job_id>/cancel/", views.job_cancel_view, name="cancel"),
    path("<int:job_id>/save-template/", views.job_save_template, name="save-template"),
    path("<int:job_id>/idle-exempt/", views.job_idle_exempt_view, name="idle-exempt"),
    path("<int:job_id>/resume/", views.job_resume_view, name="resume"),
    path("templates/", views.template_list, name="templates"),
    path("templates/<int:template_id>/delete/", views.template_delete_view, name="template-delete"),
    path("<int:job_id>/live/", views.job_live_partial, name="live"),
    path("<int:job_id>/logs/", views.job_logs_partial, name="logs"),
]

api_urlpatterns = [
    path("jobs/", apis.JobListCreateApi.as_view(), name="api-jobs"),
    path("jobs/preview/", apis.JobPreviewApi.as_view(), name="api-job-preview"),
    path("jobs/<int:job_id>/", apis.JobDetailApi.as_view(), name="api-job"),
    path("jobs/<int:job_id>/manifest/", apis.JobManifestApi.as_view(), name="api-job-manifest"),
    path("jobs/<int:job_id>/cancel/", apis.JobCancelApi.as_view(), name="api-job-cancel"),
    path("jobs/<int:job_id>/events/", apis.JobEventsApi.as_view(), name="api-job-events"),
    path("jobs/<int:job_id>/logs/", apis.JobLogsApi.as_view(), name="api-job-logs"),
    path(
        "jobs/<int:job_id>/idle-exempt/",
        apis.JobIdleExemptApi.as_view(),
        name="api-job-idle-exempt",
    ),
    path("jobs/<int:job_id>/resume/", apis.JobResumeApi.as_view(), name="api-job-resume"),
    path("templates/", apis.TemplateListCreateApi.as_view(), name="api-templates"),
    path("templates/<int:template_id>/", apis.TemplateDetailApi.as_view(), name="api-template"),
    path("cohorts/", apis.CohortListApi.as_view(), name="api-cohorts"),
    path("cohorts/<slug:slug>/", apis.CohortDetailApi.as_view(), name="api-cohort"),
]
