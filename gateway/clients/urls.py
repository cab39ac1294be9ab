from django.urls import path

from gateway.clients import views

urlpatterns = [
    path("projects", views.ProjectsApi.as_view()),
    path("projects/<int:project_id>", views.ProjectApi.as_view()),
    path("projects/<int:project_id>/keys", views.ProjectKeysApi.as_view()),
    path("projects/<int:project_id>/logs", views.ProjectRequestLogsApi.as_view()),
    path("keys/<int:key_id>", views.KeyApi.as_view()),
    path("keys/<int:key_id>/rotate", views.KeyRotateApi.as_view()),
]
