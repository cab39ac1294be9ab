from django.urls import path

from ragmux.core import views

urlpatterns = [
    path("login", views.LoginApi.as_view()),
    path("logout", views.LogoutApi.as_view()),
    path("me", views.MeApi.as_view()),
    path("me/password", views.MePasswordApi.as_view()),
    path("users", views.UsersApi.as_view()),
    path("users/<id:user_id>", views.UserApi.as_view()),
    path("users/<id:user_id>/password", views.UserPasswordApi.as_view()),
    path("audit", views.AuditApi.as_view()),
    path("audit.ndjson", views.AuditNdjsonApi.as_view()),
    path("security/logins", views.SecurityLoginsApi.as_view()),
]
