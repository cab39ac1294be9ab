"""`/v1/vector_stores`: OpenAI's Vector Stores API over our RAG stores, and its search answered by
`search_store` (the one search path of `/v1`, which ANDs the key's document scope in).

A project reaches the vector stores it created and the store an admin gave it, which appears in
its list under a row of its own (made on the first list); a key of another project finds
neither."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from gateway.clients import limiter
from gateway.clients import vector_store_selectors as selectors
from gateway.clients import vector_store_services as services
from gateway.clients.ledger import Call
from gateway.clients.models import Endpoint, Project, Scope, VectorStore
from gateway.clients.v1.endpoint import checked, json_body, v1_endpoint, validated
from gateway.clients.v1.retrieve import search_store
from gateway.clients.v1.spend import query_spend
from gateway.clients.vector_store_inputs import (
    PageQuery,
    VectorStoreCreateInput,
    VectorStoreSearchInput,
    VectorStoreUpdateInput,
)
from gateway.clients.vector_store_shapes import (
    chunking_values,
    deleted,
    list_page,
    search_result,
    vector_store_object,
)
from ragmux.core.offloop import off_loop

READ_WRITE = {"GET": Scope.FILES_READ, "POST": Scope.FILES_WRITE, "DELETE": Scope.FILES_WRITE}


def _shapes(vector_stores: list[VectorStore]) -> list[dict[str, Any]]:
    """The vector stores as OpenAI's objects, with their file counts and bytes (two statements)."""
    tallies, now = selectors.tallies(vector_stores=vector_stores), timezone.now()
    return [
        vector_store_object(vs, counts=tallies[vs.pk].counts, usage_bytes=tallies[vs.pk].usage_bytes, now=now)
        for vs in vector_stores
    ]


def _created(project: Project, data: dict[str, Any]) -> dict[str, Any]:
    attachments = [
        services.Attachment(client_file, {})
        for client_file in selectors.files_by_id(project=project, file_ids=data["file_ids"])
    ]
    expires_after = data["expires_after"]
    vector_store = services.vector_store_create(
        project=project,
        name=data["name"],
        metadata=data["metadata"] or {},
        expires_after_days=None if expires_after is None else expires_after["days"],
        chunking=chunking_values(data["chunking_strategy"]),
        attachments=attachments,
    )
    return _shapes([vector_store])[0]


def _listed(project: Project, page) -> dict[str, Any]:
    services.given_vector_store(project=project)
    vector_stores, has_more = selectors.vector_store_list(project=project, page=page)
    return list_page(_shapes(vector_stores), has_more=has_more)


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=READ_WRITE, methods=("GET", "POST"), whole_store=True)
async def vector_stores(request: HttpRequest, call: Call) -> HttpResponse:
    if request.method == "POST":
        data = validated(VectorStoreCreateInput, json_body(request))
        return JsonResponse(await off_loop(_created, call.project, data))
    page = checked(PageQuery, request.GET).page()
    return JsonResponse(await off_loop(_listed, call.project, page))


def _changed(project: Project, vector_store_id: str, data: dict[str, Any]) -> dict[str, Any]:
    vector_store = selectors.vector_store_get(project=project, vector_store_id=vector_store_id)
    changes: dict[str, Any] = {}
    if data.get("name") is not None:
        changes["name"] = data["name"]
    if "metadata" in data:
        changes["metadata"] = data["metadata"] or {}
    if "expires_after" in data:
        changes["expires_after_days"] = None if data["expires_after"] is None else data["expires_after"]["days"]
    return _shapes([services.vector_store_update(vector_store=vector_store, changes=changes)])[0]


def _deleted(project: Project, vector_store_id: str) -> dict[str, Any]:
    vector_store = selectors.vector_store_get(project=project, vector_store_id=vector_store_id)
    services.vector_store_delete(vector_store=vector_store)
    return deleted(vector_store.pk, "vector_store.deleted")


def _retrieved(project: Project, vector_store_id: str) -> dict[str, Any]:
    return _shapes([selectors.vector_store_get(project=project, vector_store_id=vector_store_id)])[0]


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=READ_WRITE, methods=("GET", "POST", "DELETE"), whole_store=True)
async def vector_store(request: HttpRequest, call: Call, vector_store_id: str) -> HttpResponse:
    if request.method == "POST":
        data = validated(VectorStoreUpdateInput, json_body(request))
        return JsonResponse(await off_loop(_changed, call.project, vector_store_id, data))
    if request.method == "DELETE":
        return JsonResponse(await off_loop(_deleted, call.project, vector_store_id))
    return JsonResponse(await off_loop(_retrieved, call.project, vector_store_id))


@v1_endpoint(endpoint=Endpoint.VECTOR_STORES, scope=Scope.FILES_READ, methods=("POST",))
async def search(request: HttpRequest, call: Call, vector_store_id: str) -> HttpResponse:
    """One search of the store (a list of queries is searched as one, joined), admitted and
    priced as `/v1/retrieve` is: its query's embedding, and its rerank when the store reranks."""
    data = validated(VectorStoreSearchInput, json_body(request))
    [store] = await selectors.searchable_stores(project=call.project, vector_store_ids=[vector_store_id])
    query = " ".join(part.strip() for part in data["query"])
    call.model = store.embedding_connection.model_name
    spend = query_spend(store, query)
    await limiter.admit(call, tokens=spend.prompt_tokens, spends=[spend])
    result = await search_store(call, store, query, {"top_k": data["max_num_results"], "filters": data["filters"]})
    files = await selectors.files_of_documents(document_ids=[hit.document_id for hit in result.hits])
    return JsonResponse(
        {
            "object": "vector_store.search_results.page",
            "search_query": data["query"],
            "data": [
                search_result(hit, file_id=files[hit.document_id][0]) for hit in result.hits if hit.document_id in files
            ],
            "has_more": False,
            "next_page": None,
        }
    )
