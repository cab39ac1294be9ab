"""`/v1/vector_stores/{id}/files` and `/file_batches`: attaching files to a vector store (each a
document of the store, ingested by the same queue as the dashboard's uploads), listing them with
the status their documents give them, changing their attributes and detaching them."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from gateway.clients import vector_store_selectors as selectors
from gateway.clients import vector_store_services as services
from gateway.clients.ledger import Call
from gateway.clients.models import Endpoint, Project, Scope, VectorStore
from gateway.clients.v1.endpoint import checked, json_body, v1_endpoint, validated
from gateway.clients.vector_store_inputs import (
    FileBatchInput,
    VectorStoreFileInput,
    VectorStoreFileListQuery,
    VectorStoreFileUpdateInput,
)
from gateway.clients.vector_store_shapes import (
    IN_PROGRESS,
    batch_object,
    deleted,
    list_page,
    vector_store_file_object,
)
from ragmux.core.offloop import off_loop

READ_WRITE = {"GET": Scope.FILES_READ, "POST": Scope.FILES_WRITE, "DELETE": Scope.FILES_WRITE}
# How soon OpenAI's SDKs poll a file or batch still in progress again (their header).
POLL_AFTER_HEADER, POLL_AFTER_MS = "openai-poll-after-ms", "500"


def _answer(shape: dict[str, Any]) -> JsonResponse:
    response = JsonResponse(shape)
    if shape.get("status") == IN_PROGRESS:
        response[POLL_AFTER_HEADER] = POLL_AFTER_MS
    return response


def _vector_store(project: Project, vector_store_id: str) -> VectorStore:
    return selectors.vector_store_get(project=project, vector_store_id=vector_store_id)


def _file_shape(vector_store: VectorStore, file_id: str) -> dict[str, Any]:
    attached = selectors.vector_store_file_get(vector_store=vector_store, file_id=file_id)
    return vector_store_file_object(attached, store=vector_store.store)


def _attached(project: Project, vector_store_id: str, data: dict[str, Any]) -> dict[str, Any]:
    vector_store = _vector_store(project, vector_store_id)
    [client_file] = selectors.files_by_id(project=project, file_ids=[data["file_id"]])
    attachment = services.Attachment(client_file, data["attributes"] or {})
    services.vector_store_file_attach(vector_store=vector_store, attachment=attachment)
    return _file_shape(vector_store, client_file.pk)


def _file_page(project: Project, vector_store_id: str, query, batch_id: str | None = None) -> dict[str, Any]:
    vector_store = _vector_store(project, vector_store_id)
    batch = None if batch_id is None else selectors.file_batch_get(vector_store=vector_store, batch_id=batch_id)
    listed, has_more = selectors.vector_store_file_list(
        vector_store=vector_store, status=query.validated_data.get("filter"), page=query.page(), batch=batch
    )
    shapes = [vector_store_file_object(attached, store=vector_store.store) for attached in listed]
    return list_page(shapes, has_more=has_more)


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=READ_WRITE, methods=("GET", "POST"), whole_store=True)
async def files(request: HttpRequest, call: Call, vector_store_id: str) -> HttpResponse:
    if request.method == "POST":
        data = validated(VectorStoreFileInput, json_body(request))
        return _answer(await off_loop(_attached, call.project, vector_store_id, data))
    query = checked(VectorStoreFileListQuery, request.GET)
    return JsonResponse(await off_loop(_file_page, call.project, vector_store_id, query))


def _file(project: Project, vector_store_id: str, file_id: str, method: str, data: dict | None) -> dict[str, Any]:
    vector_store = _vector_store(project, vector_store_id)
    attached = selectors.vector_store_file_get(vector_store=vector_store, file_id=file_id)
    if method == "DELETE":
        services.vector_store_file_delete(vector_store_file=attached)
        return deleted(attached.file_id, "vector_store.file.deleted")
    if method == "POST":
        services.vector_store_file_update(vector_store_file=attached, attributes=data["attributes"] or {})
    return _file_shape(vector_store, file_id)


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=READ_WRITE, methods=("GET", "POST", "DELETE"), whole_store=True)
async def file(request: HttpRequest, call: Call, vector_store_id: str, file_id: str) -> HttpResponse:
    data = validated(VectorStoreFileUpdateInput, json_body(request)) if request.method == "POST" else None
    return _answer(await off_loop(_file, call.project, vector_store_id, file_id, request.method, data))


def _batch_shape(vector_store: VectorStore, batch_id: str) -> dict[str, Any]:
    batch = selectors.file_batch_get(vector_store=vector_store, batch_id=batch_id)
    return batch_object(batch, counts=selectors.batch_tally(batch=batch).counts)


def _batch_created(project: Project, vector_store_id: str, attachments: list[tuple[str, dict]]) -> dict[str, Any]:
    vector_store = _vector_store(project, vector_store_id)
    client_files = selectors.files_by_id(project=project, file_ids=[file_id for file_id, _ in attachments])
    by_id = {client_file.pk: client_file for client_file in client_files}
    batch = services.file_batch_create(
        vector_store=vector_store,
        attachments=[services.Attachment(by_id[file_id], attributes) for file_id, attributes in attachments],
    )
    return _batch_shape(vector_store, batch.pk)


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=Scope.FILES_WRITE, methods=("POST",), whole_store=True)
async def file_batches(request: HttpRequest, call: Call, vector_store_id: str) -> HttpResponse:
    attachments = checked(FileBatchInput, json_body(request)).attachments()
    return _answer(await off_loop(_batch_created, call.project, vector_store_id, attachments))


def _batch(project: Project, vector_store_id: str, batch_id: str, cancel: bool) -> dict[str, Any]:
    vector_store = _vector_store(project, vector_store_id)
    if cancel:
        services.file_batch_cancel(batch=selectors.file_batch_get(vector_store=vector_store, batch_id=batch_id))
    return _batch_shape(vector_store, batch_id)


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=Scope.FILES_READ, methods=("GET",), whole_store=True)
async def file_batch(request: HttpRequest, call: Call, vector_store_id: str, batch_id: str) -> HttpResponse:
    return _answer(await off_loop(_batch, call.project, vector_store_id, batch_id, False))


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=Scope.FILES_WRITE, methods=("POST",), whole_store=True)
async def file_batch_cancel(request: HttpRequest, call: Call, vector_store_id: str, batch_id: str) -> HttpResponse:
    return _answer(await off_loop(_batch, call.project, vector_store_id, batch_id, True))


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=Scope.FILES_READ, methods=("GET",), whole_store=True)
async def file_batch_files(request: HttpRequest, call: Call, vector_store_id: str, batch_id: str) -> HttpResponse:
    query = checked(VectorStoreFileListQuery, request.GET)
    return JsonResponse(await off_loop(_file_page, call.project, vector_store_id, query, batch_id))
