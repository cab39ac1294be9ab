from django.urls import include, path
from django.views.generic import RedirectView

from ragmux import views
from ragmux.dashboard import sign_in

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("metrics", views.metrics),
    path("admin/login/", sign_in.DashboardLoginView.as_view(), name="login"),
    path("admin/logout/", sign_in.DashboardLogoutView.as_view(), name="logout"),
    path("admin/api/", include("ragmux.core.urls")),
    path("admin/api/", include("gateway.connections.urls")),
    path("admin/api/", include("ingestion.urls")),
    path("admin/api/", include("stores.urls")),
    path("admin/api/", include("retrieval.urls")),
    path("admin/api/", include("gateway.clients.urls")),
    path("v1/", include("gateway.clients.v1_urls")),
    path("v2/", include("gateway.clients.v2_urls")),
    # After the API: the dashboard's pages are everything else under /admin/.
    path("admin/", include("ragmux.dashboard.urls")),
]

handler403 = "ragmux.dashboard.access.forbidden"
handler404 = "ragmux.views.not_found"
handler500 = "ragmux.views.server_error"
