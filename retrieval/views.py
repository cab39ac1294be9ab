"""The dashboard's search test: any role may search a store with per-call overrides."""

from __future__ import annotations

import time

from rest_framework.response import Response

from retrieval.rerank import reranked_search
from retrieval.serializers import CorrectionOutput, HitOutput, SearchInput, rerank_fields
from stores.views import StoreEndpoint


class StoreSearchApi(StoreEndpoint):
    def post(self, request, store_id: int):
        started = time.monotonic()
        data = SearchInput(data=request.data)
        data.is_valid(raise_exception=True)
        query = data.validated_data["query"]
        overrides = {k: v for k, v in data.validated_data.items() if k != "query"}
        # No project's chat model to borrow here: every backend reranks with the store's connection.
        result = reranked_search(store=self.store, query=query, overrides=overrides)
        return Response(
            {
                "mode": result.mode,
                "backend": result.backend,
                "fts_config": result.fts_config,
                "corrections": CorrectionOutput(result.corrections, many=True).data,
                **rerank_fields(result),
                "latency_ms": round((time.monotonic() - started) * 1000),
                "retrieval_latency_ms": round(result.embedding_ms + result.database_ms),
                "hits": HitOutput(result.hits, many=True).data,
            }
        )
