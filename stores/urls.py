from django.urls import path

from stores import views

urlpatterns = [
    path("rag-stores", views.StoresApi.as_view()),
    path("rag-stores/<id:store_id>", views.StoreApi.as_view()),
    path("documents/<id:document_id>", views.DocumentApi.as_view()),
    path("documents/<id:document_id>/download", views.DocumentDownloadApi.as_view()),
    path("search-backends", views.SearchBackendsApi.as_view()),
    path("text-search-configs", views.TextSearchConfigsApi.as_view()),
]
