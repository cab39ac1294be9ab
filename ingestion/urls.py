from django.urls import path

from ingestion import views

urlpatterns = [
    path("rag-stores/<id:store_id>/documents", views.StoreDocumentsApi.as_view()),
    path("rag-stores/<id:store_id>/documents/text", views.StoreTextDocumentApi.as_view()),
    path("rag-stores/<id:store_id>/reprocess", views.StoreReprocessApi.as_view()),
    path("documents/<id:document_id>/reprocess", views.DocumentReprocessApi.as_view()),
]
