"""POST /v1/retrieve, and the store search a chat grounds itself with."""

from __future__ import annotations

import time
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from gateway.clients import limiter, selectors
from gateway.clients.ledger import Call, Spend
from gateway.clients.models import Endpoint, RerankOutcome, Scope
from gateway.clients.offloop import off_loop
from gateway.clients.serializers import RetrieveInput
from gateway.clients.v1.endpoint import json_body, v1_endpoint, validated
from gateway.clients.v1.spend import count_embedding, count_rerank, estimated_if_cancelled, query_spend, rerank_estimate
from gateway.connections.providers.embeddings import Embeddings, estimate_tokens
from ragmux.core.errors import (
    InvalidInput,
)
from retrieval import context as rag_context
from retrieval.rerank import RerankReport, project_rerank_connection, rerank_async
from retrieval.search import SearchOptions, SearchResult, embed_query_async, store_search
from retrieval.serializers import HitOutput, rerank_fields
from stores.models import RagStore


async def search_store(
    call: Call, store: RagStore, query: str, overrides: dict[str, Any] | None = None
) -> SearchResult:
    """:func:`store_search` with the query embedded here, on the event loop, so a client that leaves
    ends that upstream call too; its tokens are counted even then (estimated when unanswered)."""
    embeds = SearchOptions.for_store(store, overrides).embeds_query(store)
    embedded: Embeddings | None = None

    def spent_so_far() -> None:
        if embedded is not None:
            count_embedding(call, store.embedding_connection, embedded.tokens, reported=embedded.tokens_reported)
        elif embeds:
            count_embedding(call, store.embedding_connection, estimate_tokens([query]), reported=False)

    with estimated_if_cancelled(spent_so_far):
        started = time.monotonic()
        if embeds:
            embedded = await embed_query_async(store, query)
        vector = None if embedded is None else embedded.vectors[0]
        result = await off_loop(
            store_search,
            store=store,
            query=query,
            overrides=overrides,
            query_vector=vector,
            query_embedding_ms=(time.monotonic() - started) * 1000,
        )
    if embedded is not None:
        result.embedding_tokens, result.embedding_tokens_reported = embedded.tokens, embedded.tokens_reported
    return result


async def rerank_and_record(call: Call, store: RagStore, query: str, result: SearchResult) -> None:
    """The store's rerank of ``result``, when it has reranking on (`llm` asks the project's own chat
    model), then what the search and its rerank spent onto the call. Outside the search's
    SEARCH_TIMEOUT, as a rerank has timeouts of its own; a failure keeps the fused order
    (retrieval.rerank). A client that leaves during the rerank is charged the query's embedding
    and the rerank's estimate."""
    if not result.options.rerank:
        _record_search(call, store, result)
        return
    chat_connection = call.project.chat_connection
    if chat_connection is None:
        # A project that chats through a route reranks (`llm`) with the route's first target.
        routed = await selectors.chat_route(project=call.project, model="")
        chat_connection = None if routed is None else routed[1][0].connection
    # The store's rerank connection or route targets, which the key's statement does not load.
    choice = await off_loop(project_rerank_connection, store, result, chat_connection=chat_connection)

    def unanswered() -> None:
        _record_search(call, store, result)
        if choice.connection is not None:
            pool = [hit.content for hit in result.hits[: result.options.rerank_candidates]]
            estimate = rerank_estimate(result.options.rerank_backend, query, pool)
            count_rerank(call, choice.connection, choice.connection.model_name, estimate)

    with estimated_if_cancelled(unanswered):
        await rerank_async(result, query=query, choice=choice)
    _record_search(call, store, result)


def _rerank_outcome(report: RerankReport) -> tuple[str, str]:
    """A rerank's outcome on the request log row, and why when it did not rerank."""
    if report.reranked:
        return RerankOutcome.RERANKED, ""
    if report.skipped:
        return RerankOutcome.SKIPPED, report.skipped_reason
    return RerankOutcome.FALLBACK, report.fallback_reason


def _record_search(call: Call, store: RagStore, result: SearchResult) -> None:
    """What a call's search found, what embedding its query cost and what its rerank spent."""
    call.rag_hits = len(result.hits)
    call.sources = rag_context.sources(result.hits)
    call.embedding_tokens = result.embedding_tokens
    call.tokens_estimated = not result.embedding_tokens_reported
    if result.embedding_tokens:
        embedder = store.embedding_connection
        call.spends.append(Spend(embedder.provider_type, embedder.model_name, result.embedding_tokens))
    report = result.rerank
    if report is None:
        return
    call.rerank_outcome, call.rerank_reason = _rerank_outcome(report)
    for connection, billed in report.billed:
        count_rerank(call, connection, connection.model_name, billed)
    if report.spent is not None:
        count_rerank(call, report.connection, report.connection.model_name, report.spent)


@v1_endpoint(endpoint=Endpoint.RETRIEVE, scope=Scope.RETRIEVE, methods=("POST",))
async def retrieve(request: HttpRequest, call: Call) -> HttpResponse:
    data = validated(RetrieveInput, json_body(request))
    store = call.project.store
    if store is None:
        raise InvalidInput("this project has no RAG store to retrieve from", code="no_store")
    call.model = store.embedding_connection.model_name
    spend = query_spend(store, data["query"])
    await limiter.admit(call, tokens=spend.prompt_tokens, spends=[spend])
    result = await search_store(call, store, data["query"], {"top_k": data["top_k"]})
    await rerank_and_record(call, store, data["query"], result)
    return JsonResponse(
        {
            "object": "list",
            "data": HitOutput(result.hits, many=True).data,
            "mode": result.mode,
            "backend": result.backend,
            "fts_config": result.fts_config,
            **rerank_fields(result),
            "usage": {
                "prompt_tokens": result.embedding_tokens,
                "rerank_tokens": call.rerank_tokens,
                "total_tokens": result.embedding_tokens + call.rerank_tokens,
            },
        }
    )
