from django.urls import include, path
from django.views.generic import RedirectView

from ragmux import views

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("", include("django_prometheus.urls")),
    path("admin/login/", views.DashboardLoginView.as_view(), name="login"),
    path("admin/logout/", views.DashboardLogoutView.as_view(), name="logout"),
    path("admin/api/login", views.LoginApi.as_view()),
    path("admin/api/logout", views.LogoutApi.as_view()),
    path("admin/api/me", views.MeApi.as_view()),
    path("admin/api/me/password", views.MePasswordApi.as_view()),
    path("admin/api/users", views.UsersApi.as_view()),
    path("admin/api/users/<id:user_id>", views.UserApi.as_view()),
    path("admin/api/users/<id:user_id>/password", views.UserPasswordApi.as_view()),
    path("admin/api/audit", views.AuditApi.as_view()),
    path("admin/api/", include("gateway.connections.urls")),
    path("admin/api/", include("ingestion.urls")),
    path("admin/api/", include("stores.urls")),
    path("admin/api/", include("retrieval.urls")),
    path("admin/api/", include("gateway.clients.urls")),
    path("v1/", include("gateway.clients.v1_urls")),
    # After the API: the dashboard's pages are everything else under /admin/.
    path("admin/", include("ragmux.dashboard.urls")),
]

handler403 = "ragmux.dashboard.views.forbidden"
handler404 = "ragmux.views.not_found"
handler500 = "ragmux.views.server_error"
