from django.urls import path

from retrieval import views

urlpatterns = [
    path("rag-stores/<id:store_id>/search", views.StoreSearchApi.as_view()),
]
