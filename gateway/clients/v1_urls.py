from django.urls import path

from gateway.clients import v1

urlpatterns = [
    path("chat/completions", v1.chat_completions),
    path("retrieve", v1.retrieve),
    path("embeddings", v1.embeddings),
    path("rerank", v1.rerank),
    path("models", v1.models),
    path("models/<path:model_id>", v1.model),
]
