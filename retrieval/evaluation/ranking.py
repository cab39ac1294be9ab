"""The one place a search becomes a document ranking for evaluation: the store's search asked for
a pool of ``POOL`` chunks (and ``POOL`` candidates per side), reranked when its options say so, as
the search endpoint reranks, and collapsed to documents, each at its best chunk.

Evaluation runs, ``ragmux eval`` and bench/quality.py all rank through here, so their figures are
the same search's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from retrieval.evaluation.scores import POOL, collapse_to_documents
from retrieval.rerank import RerankReport, rerank, store_rerank_connection
from retrieval.search import SearchOptions, store_search
from stores.models import RagStore


@dataclass(frozen=True)
class RankedSearch:
    documents: list[int]  # Document ids, best first
    sources: list[str]  # each of those documents' `source`, in the same order
    latency_ms: float  # the search and its rerank (not the query's embedding when its vector was given)
    rerank: RerankReport | None  # None when the search was not reranked


def pool_options(store: RagStore, overrides: dict[str, Any]) -> SearchOptions:
    """The options of an evaluation's searches: the store's settings with ``overrides`` (the search
    endpoint's overrides) applied and the pool's top_k; built once for every question of a run."""
    return SearchOptions.for_store(store, {**overrides, "top_k": POOL})


def rank_documents(
    *, store: RagStore, query: str, options: SearchOptions, query_vector: list[float] | None
) -> RankedSearch:
    """``query`` searched in ``store`` with ``options`` (:func:`pool_options`), its chunks collapsed
    to documents. With ``query_vector`` None the search embeds the query itself."""
    started = time.perf_counter()
    result = store_search(store=store, query=query, options=options, candidates=POOL, query_vector=query_vector)
    if result.options.rerank:
        rerank(result, query=query, choice=store_rerank_connection(store, result))
    latency_ms = (time.perf_counter() - started) * 1000
    source_of = {hit.document_id: hit.source for hit in result.hits}
    documents = collapse_to_documents(hit.document_id for hit in result.hits)
    return RankedSearch(
        documents=documents,
        sources=[source_of[document] for document in documents],
        latency_ms=latency_ms,
        rerank=result.rerank,
    )
