"""Retrieval for client calls: the project's store searched through the one search function,
with the query embedding's tokens counted for the request log."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.connections.providers.embeddings import embedding_provider
from ragmux.core.errors import UpstreamFailed
from retrieval.search import SearchOptions, SearchResult, store_search
from stores.models import RagStore


@dataclass
class Grounding:
    result: SearchResult
    embedding_tokens: int = 0
    tokens_reported: bool = True


def search_store(*, store: RagStore, query: str, top_k: int | None = None) -> Grounding:
    """Searches with the store's saved settings (``top_k`` aside). The query is embedded here,
    not inside the search, so its tokens can be billed to the calling project."""
    options = SearchOptions.for_store(store, {"top_k": top_k})
    embedded = None
    if store.dimensions is not None and (options.mode in ("vector", "hybrid") or options.max_distance > 0):
        try:
            embedded = embedding_provider(store.embedding_connection).embed([query])
        except UpstreamFailed as exc:
            raise UpstreamFailed(f"embedding the query failed: {exc}", code="embedding_failed") from None
    result = store_search(
        store=store,
        query=query,
        overrides={"top_k": top_k},
        query_vector=embedded.vectors[0] if embedded else None,
    )
    if embedded is None:
        return Grounding(result)
    return Grounding(result, embedded.tokens, embedded.tokens_reported)
