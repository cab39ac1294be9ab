"""POST /v1/rerank (and /v2/rerank, Cohere's ClientV2 path)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from gateway.clients import limiter, selectors
from gateway.clients.ledger import Call, Spend
from gateway.clients.models import Endpoint, RerankOutcome, Scope
from gateway.clients.serializers import RerankInput
from gateway.clients.v1.endpoint import json_body, routed, v1_endpoint, validated
from gateway.clients.v1.spend import count_rerank, estimated_if_cancelled
from gateway.connections.failover import Attempts, Plan, Target
from gateway.connections.providers.rerank import (
    Reranked,
    Reranker,
    RerankUnreadable,
    backend_of,
    estimated_rerank,
    reranker,
)
from ragmux.core.errors import (
    NotFound,
)
from retrieval.rerank_prompt import listwise_prompt


async def _rerank_plan(call: Call, model: str) -> tuple[Plan, dict[Target, str]]:
    """Who reranks for a `model`: the rerank route of that name the project allows (or its store
    reranks through), else the rerank connection of the project's store when ``model`` is its
    name or its model's; with the backend each target reranks with. Anything else is no model of this project."""
    found = await selectors.rerank_route(project=call.project, model=model)
    if found is not None:
        plan = Plan.of_route(*found)
        return plan, {target: backend_of(target.connection) for target in plan.targets}
    store = call.project.store
    connection = None if store is None else await selectors.store_rerank_connection(store=store)
    if connection is None or model not in (connection.name, connection.model_name):
        raise NotFound(f"no rerank model {model!r} for this project", code="model_not_found")
    plan = Plan.of_connection(connection)
    return plan, {plan.targets[0]: store.rerank_backend}


@v1_endpoint(endpoint=Endpoint.RERANK, scope=Scope.RERANK, methods=("POST",))
async def rerank(request: HttpRequest, call: Call) -> HttpResponse:
    data = validated(RerankInput, json_body(request))
    query, documents, top_n = data["query"], data["documents"], data["top_n"]
    plan, backends = await _rerank_plan(call, data["model"])
    attempts = Attempts(plan.targets[0])
    call.model = attempts.current.model
    estimates = {target: estimated_rerank(backend, query, documents) for target, backend in backends.items()}
    await limiter.admit(
        call,
        tokens=max(estimate.tokens for estimate in estimates.values()),
        spends=[],
        dearest_of=[
            Spend.of_rerank(target.connection.provider_type, target.model, estimate)
            for target, estimate in estimates.items()
        ],
    )

    def open_target(target: Target) -> Reranker:
        return reranker(
            target.connection,
            backend=backends[target],
            model=target.model,
            prompt=listwise_prompt,
            timeout=target.first_byte_timeout,
        )

    def unanswered() -> None:
        target = attempts.current
        count_rerank(call, target.connection, target.model, estimates[target])

    async def ranked(ranker: Reranker, once) -> Reranked:
        try:
            return await ranker.rerank_async(query, documents, top_n=top_n)
        except RerankUnreadable as exc:
            # A reply we could not use was billed all the same.
            if exc.spent is not None:
                count_rerank(call, attempts.current.connection, attempts.current.model, exc.spent)
            raise

    with estimated_if_cancelled(unanswered):
        reranked = await routed(call, plan, attempts, ranked, open_target=open_target)
    target = attempts.current
    call.model = target.model
    call.rerank_outcome = RerankOutcome.RERANKED
    count_rerank(call, target.connection, target.model, reranked)
    meta: dict[str, Any] = {"tokens": {"input_tokens": reranked.input_tokens, "output_tokens": reranked.output_tokens}}
    if reranked.search_units is not None:
        meta["billed_units"] = {"search_units": reranked.search_units}
    results = [
        {"index": ranked.index, "relevance_score": ranked.relevance_score} for ranked in reranked.ranking[:top_n]
    ]
    if data["return_documents"]:
        for result in results:
            result["document"] = {"text": documents[result["index"]]}
    return JsonResponse(
        {
            "id": getattr(request, "request_id", ""),
            "results": results,
            "meta": meta,
            "usage": {
                "prompt_tokens": reranked.input_tokens,
                "completion_tokens": reranked.output_tokens,
                "total_tokens": reranked.tokens,
            },
        }
    )
