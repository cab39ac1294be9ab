from django.urls import path

from ragmux.dashboard import connections, users, views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("stores/", views.stores, name="stores"),
    path("stores/new", views.store_create, name="store-create"),
    path("stores/<id:store_id>/", views.store_detail, name="store"),
    path("stores/<id:store_id>/documents", views.store_documents, name="store-documents"),
    path("stores/<id:store_id>/upload", views.store_upload, name="store-upload"),
    path("stores/<id:store_id>/text", views.store_text, name="store-text"),
    path("stores/<id:store_id>/reprocess", views.store_reprocess, name="store-reprocess"),
    path("stores/<id:store_id>/settings", views.store_settings, name="store-settings"),
    path("stores/<id:store_id>/delete", views.store_delete, name="store-delete"),
    path("stores/<id:store_id>/search-settings", views.search_save, name="search-save"),
    path("documents/<id:document_id>/reprocess", views.document_reprocess, name="document-reprocess"),
    path("documents/<id:document_id>/delete", views.document_delete, name="document-delete"),
    path("search/", views.search, name="search"),
    path("connections/", connections.connections, name="connections"),
    path("connections/new", connections.connection_create, name="connection-create"),
    path("connections/<id:connection_id>/edit", connections.connection_edit, name="connection-edit"),
    path("connections/<id:connection_id>/delete", connections.connection_delete, name="connection-delete"),
    path("connections/<id:connection_id>/test", connections.connection_test, name="connection-test"),
    path("prices/", connections.prices, name="prices"),
    path("prices/new", connections.price_create, name="price-create"),
    path("prices/<id:price_id>/edit", connections.price_edit, name="price-edit"),
    path("prices/<id:price_id>/delete", connections.price_delete, name="price-delete"),
    path("users/", users.users, name="users"),
    path("users/new", users.user_create, name="user-create"),
    path("users/<id:user_id>/", users.user_detail, name="user"),
    path("users/<id:user_id>/update", users.user_update, name="user-update"),
    path("users/<id:user_id>/password", users.user_password, name="user-password"),
    path("account/password", users.account_password, name="account-password"),
    path("audit/", users.audit, name="audit"),
]
