from django.urls import path

from gateway.clients.v1 import rerank

# Cohere's ClientV2 posts its rerank here; the request and answer are the v1 endpoint's.
urlpatterns = [
    path("rerank", rerank.rerank),
]
