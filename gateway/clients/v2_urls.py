from django.urls import path

from gateway.clients import v1

# Cohere's ClientV2 posts its rerank here; the request and answer are the v1 endpoint's.
urlpatterns = [
    path("rerank", v1.rerank),
]
