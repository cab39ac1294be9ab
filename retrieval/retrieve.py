"""A store searched from the event loop: the one entry point of a `/v1` chat's grounding and of
`/v1/retrieve`. The query is embedded on the loop, the search runs in a worker thread, the rerank
on the loop again (a rerank route's targets through the failover engine), and what it all spent
comes back in one report, so a client that leaves ends the upstream call it was waiting for and is
still charged what was spent (estimated where no upstream had said yet)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from gateway.connections.failover import Target
from gateway.connections.models import ModelConnection, RouteTarget
from gateway.connections.providers.embeddings import Embeddings, estimate_tokens
from gateway.connections.providers.rerank import LLM_BACKEND, Reranked
from ragmux.core.offloop import off_loop
from retrieval.rerank import RerankChoice, rerank_async, store_rerank_connection
from retrieval.search import SearchOptions, SearchResult, embed_query_async, store_search
from stores.models import RagStore

NO_CHAT_TO_RERANK_WITH = "the project has no chat connection to rerank with"


@dataclass
class RetrievalSpend:
    """What one search spent, for the caller to bill once the search has ended or was cancelled
    (``billable`` then; an upstream call in flight counted by its estimate). A search that failed
    is not billed: its trouble is the answer."""

    # The query's embedding, by the store's embedding connection: the upstream's count when it
    # reported one (0 when the query was not embedded).
    embedding_tokens: int = 0
    embedding_tokens_reported: bool = True
    # The search, once it has run: its hits (cut to top_k once reranked) and its rerank report.
    result: SearchResult | None = None
    # What the rerank spent, by the target that spent it (see RerankReport.spends).
    reranks: list[tuple[Target, Reranked]] = field(default_factory=list)
    billable: bool = False

    def embedded(self, tokens: int, *, reported: bool) -> None:
        self.embedding_tokens, self.embedding_tokens_reported = tokens, reported


@contextmanager
def _billable_unless_it_fails(spend: RetrievalSpend) -> Iterator[None]:
    """``spend`` made billable once the block ends, or is cancelled or times out."""
    try:
        yield
    except (asyncio.CancelledError, TimeoutError):
        spend.billable = True
        raise
    spend.billable = True


async def search_and_rerank(
    *,
    store: RagStore,
    query: str,
    overrides: dict[str, Any] | None = None,
    chat_connection: ModelConnection | None,
    chat_route_id: int | None,
    spend: RetrievalSpend,
    search_timeout: float | None = None,
) -> SearchResult:
    """``query`` searched in ``store`` with ``overrides``, and reranked when its options say so:
    the `llm` backend with the project's chat model (``chat_connection``, else the first target
    of its chat route), the API backends with the store's rerank connection or route. The
    embedding and the search together must end within ``search_timeout`` (else ``TimeoutError``);
    the rerank has timeouts of its own, and its failure keeps the fused order (`retrieval.rerank`).
    What was spent is written into ``spend`` as it is spent, for the caller to bill when it is
    ``billable``: once this returns, is cancelled or times out.

    Raises what :func:`~retrieval.search.store_search` raises."""
    options = SearchOptions.for_store(store, overrides)
    with _billable_unless_it_fails(spend):
        async with asyncio.timeout(search_timeout) if search_timeout is not None else nullcontext():
            spend.result = await _search(store, query, options, spend)
        if options.rerank:
            choice = await _rerank_choice(store, spend.result, chat_connection, chat_route_id)
            await rerank_async(spend.result, query=query, choice=choice, spends=spend.reranks)
    return spend.result


async def _search(store: RagStore, query: str, options: SearchOptions, spend: RetrievalSpend) -> SearchResult:
    """The query embedded on the loop (when the search needs its vector), then the search in a
    worker thread with that vector."""
    started = time.monotonic()
    embedded: Embeddings | None = None
    if options.embeds_query(store):
        try:
            embedded = await embed_query_async(store, query)
        except asyncio.CancelledError:
            spend.embedded(estimate_tokens([query]), reported=False)
            raise
        spend.embedded(embedded.tokens, reported=embedded.tokens_reported)
    result = await off_loop(
        store_search,
        store=store,
        query=query,
        options=options,
        query_vector=None if embedded is None else embedded.vectors[0],
        query_embedding_ms=(time.monotonic() - started) * 1000,
    )
    if embedded is not None:
        result.embedding_tokens, result.embedding_tokens_reported = embedded.tokens, embedded.tokens_reported
    else:
        # A store whose first ingest came after the caller loaded it: the search embedded the query.
        spend.embedded(result.embedding_tokens, reported=result.embedding_tokens_reported)
    return result


async def _rerank_choice(
    store: RagStore, result: SearchResult, chat_connection: ModelConnection | None, chat_route_id: int | None
) -> RerankChoice:
    """In a project's request `llm` reranks with the project's own chat model (the first target of
    its chat route when it chats through one); the API backends with the store's rerank connection
    or route. What the key's statement did not load is read in a worker thread."""
    if result.options.rerank_backend != LLM_BACKEND:
        return await off_loop(store_rerank_connection, store, result)
    if chat_connection is None and chat_route_id is not None:
        chat_connection = await off_loop(_first_target, chat_route_id)
    return RerankChoice.of_connection(chat_connection, NO_CHAT_TO_RERANK_WITH)


def _first_target(route_id: int) -> ModelConnection | None:
    first = RouteTarget.objects.filter(route_id=route_id).select_related("connection").order_by("position").first()
    return None if first is None else first.connection
