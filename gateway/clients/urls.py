from django.urls import path

from gateway.clients import views

urlpatterns = [
    path("projects", views.ProjectsApi.as_view()),
    path("projects/<id:project_id>", views.ProjectApi.as_view()),
    path("projects/<id:project_id>/keys", views.ProjectKeysApi.as_view()),
    path("projects/<id:project_id>/logs", views.ProjectRequestLogsApi.as_view()),
    path("projects/<id:project_id>/usage", views.ProjectUsageApi.as_view()),
    path("keys", views.KeysApi.as_view()),
    path("keys/<id:key_id>", views.KeyApi.as_view()),
    path("keys/<id:key_id>/rotate", views.KeyRotateApi.as_view()),
    path("keys/<id:key_id>/usage", views.KeyUsageApi.as_view()),
    path("usage/summary", views.UsageSummaryApi.as_view()),
    path("request-logs", views.RequestLogsApi.as_view()),
    path("request-logs.csv", views.RequestLogsCsvApi.as_view()),
]
