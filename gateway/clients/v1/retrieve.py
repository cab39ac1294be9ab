"""POST /v1/retrieve, and the store search a chat grounds itself with: one call of
`retrieval.retrieve`, whose one report of what was spent lands on the call's row."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from gateway.clients import access, limiter
from gateway.clients.ledger import Call, Spend
from gateway.clients.models import Endpoint, RerankOutcome, Scope
from gateway.clients.serializers import RetrieveInput
from gateway.clients.v1.endpoint import json_body, v1_endpoint, validated
from gateway.clients.v1.spend import count_rerank, query_spend
from ragmux.core.errors import (
    InvalidInput,
)
from retrieval import context as rag_context
from retrieval.rerank import RerankReport
from retrieval.retrieve import RetrievalSpend, search_and_rerank
from retrieval.search import SearchResult
from retrieval.serializers import HitOutput, rerank_fields
from stores.models import RagStore


async def search_store(
    call: Call,
    store: RagStore,
    query: str,
    overrides: dict[str, Any] | None = None,
    *,
    search_timeout: float | None = None,
) -> SearchResult:
    """``query`` searched in the project's ``store`` and reranked when the store says so, by
    retrieval's one entry point (`retrieval.retrieve.search_and_rerank`, entered once); what it
    found and spent lands on the call's row, a client that leaves midway included. The embedding
    and the search must end within ``search_timeout`` (a chat's grounding: SEARCH_TIMEOUT), else
    ``TimeoutError``. Every search of a call comes here: the key's document scope is ANDed in
    here, with whatever filter the client sent."""
    overrides = {**(overrides or {}), "filters": access.scoped_filters(call.key, (overrides or {}).get("filters"))}
    spend = RetrievalSpend()
    try:
        return await search_and_rerank(
            store=store,
            query=query,
            overrides=overrides,
            chat_connection=call.project.chat_connection,
            chat_route_id=call.project.chat_route_id,
            spend=spend,
            search_timeout=search_timeout,
        )
    finally:
        if spend.billable:
            _record_retrieval(call, store, spend)


def _rerank_outcome(report: RerankReport) -> tuple[str, str]:
    """A rerank's outcome on the request log row, and why when it did not rerank."""
    if report.reranked:
        return RerankOutcome.RERANKED, ""
    if report.skipped:
        return RerankOutcome.SKIPPED, report.skipped_reason
    return RerankOutcome.FALLBACK, report.fallback_reason


def _record_retrieval(call: Call, store: RagStore, spend: RetrievalSpend) -> None:
    """What a call's search found, what embedding its query cost and what its rerank spent, added
    to what the call's other searches (a `file_search` over several stores) recorded. A rerank
    that fell back stays the row's outcome whatever another store's did."""
    call.embedding_tokens += spend.embedding_tokens
    # Or-ed: another search, or a query rewrite before the search, may have estimated its tokens.
    call.tokens_estimated = call.tokens_estimated or not spend.embedding_tokens_reported
    if spend.embedding_tokens:
        embedder = store.embedding_connection
        call.spends.append(Spend(embedder.provider_type, embedder.model_name, spend.embedding_tokens))
    if spend.result is not None:
        call.rag_hits += len(spend.result.hits)
        call.sources += rag_context.sources(spend.result.hits)
        if spend.result.rerank is not None and call.rerank_outcome != RerankOutcome.FALLBACK:
            call.rerank_outcome, call.rerank_reason = _rerank_outcome(spend.result.rerank)
    for target, reranked in spend.reranks:
        count_rerank(call, target.connection, target.model, reranked)


@v1_endpoint(endpoint=Endpoint.RETRIEVE, scope=Scope.RETRIEVE, methods=("POST",))
async def retrieve(request: HttpRequest, call: Call) -> HttpResponse:
    data = validated(RetrieveInput, json_body(request))
    store = call.project.store
    if store is None:
        raise InvalidInput("this project has no RAG store to retrieve from", code="no_store")
    call.model = store.embedding_connection.model_name
    spend = query_spend(store, data["query"])
    await limiter.admit(call, tokens=spend.prompt_tokens, spends=[spend])
    result = await search_store(call, store, data["query"], {"top_k": data["top_k"], "filters": data["filters"]})
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
