from django.urls import path

from ragmux.dashboard import views

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
]
