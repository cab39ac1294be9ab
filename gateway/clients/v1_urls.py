from django.urls import path

from gateway.clients.v1 import (
    chat,
    embeddings,
    files,
    model_list,
    rerank,
    responses,
    retrieve,
    vector_store_files,
    vector_stores,
)

VECTOR_STORE = "vector_stores/<str:vector_store_id>"
FILE_BATCH = f"{VECTOR_STORE}/file_batches/<str:batch_id>"

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
    path("files", files.files),
    path("files/<str:file_id>", files.file),
    path("files/<str:file_id>/content", files.file_content),
    path("vector_stores", vector_stores.vector_stores),
    path(VECTOR_STORE, vector_stores.vector_store),
    path(f"{VECTOR_STORE}/search", vector_stores.search),
    path(f"{VECTOR_STORE}/files", vector_store_files.files),
    path(f"{VECTOR_STORE}/files/<str:file_id>", vector_store_files.file),
    path(f"{VECTOR_STORE}/file_batches", vector_store_files.file_batches),
    path(FILE_BATCH, vector_store_files.file_batch),
    path(f"{FILE_BATCH}/cancel", vector_store_files.file_batch_cancel),
    path(f"{FILE_BATCH}/files", vector_store_files.file_batch_files),
]
