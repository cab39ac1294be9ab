from django.urls import path

from gateway.clients.v1 import chat, embeddings, model_list, rerank, responses, retrieve

urlpatterns = [
    path("chat/completions", chat.chat_completions),
    path("retrieve", retrieve.retrieve),
    path("embeddings", embeddings.embeddings),
    path("rerank", rerank.rerank),
    path("models", model_list.models),
    path("models/<path:model_id>", model_list.model),
    path("responses", responses.create),
    path("responses/<str:response_id>", responses.stored),
    path("responses/<str:response_id>/input_items", responses.listed_input_items),
]
