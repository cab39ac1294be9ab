from django.urls import path

from gateway.connections import views

urlpatterns = [
    path("provider-types", views.ProviderTypesApi.as_view()),
    path("models", views.ConnectionsApi.as_view()),
    path("models/test", views.ConnectionTrialApi.as_view()),
    path("models/<id:connection_id>", views.ConnectionApi.as_view()),
    path("models/<id:connection_id>/test", views.ConnectionTestApi.as_view()),
    path("model-prices", views.PricesApi.as_view()),
    path("model-prices/<id:price_id>", views.PriceApi.as_view()),
    path("routes", views.RoutesApi.as_view()),
    path("routes/<id:route_id>", views.RouteApi.as_view()),
]
