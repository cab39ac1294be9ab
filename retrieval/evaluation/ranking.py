# TEMPORARY (evalapp): the design's interface until evalcore commits its ranking.py (a merge takes evalcore's).
from __future__ import annotations

import time
from dataclasses import dataclass

from retrieval.evaluation.metrics import POOL, collapse_to_documents
from retrieval.rerank import RerankReport, rerank, store_rerank_connection
from retrieval.search import store_search


@dataclass(frozen=True)
class RankedSearch:
    documents: list[int]
    sources: list[str]
    latency_ms: float
    rerank: RerankReport | None


def rank_documents(*, store, query, overrides, query_vector=None) -> RankedSearch:
    started = time.monotonic()
    result = store_search(
        store=store, query=query, overrides={**overrides, "top_k": POOL}, candidates=POOL, query_vector=query_vector
    )
    if result.options.rerank:
        rerank(result, query=query, choice=store_rerank_connection(store, result))
    documents = collapse_to_documents(hit.document_id for hit in result.hits)
    sources = {hit.document_id: hit.source for hit in result.hits}
    return RankedSearch(documents, [sources[d] for d in documents], (time.monotonic() - started) * 1000, result.rerank)
