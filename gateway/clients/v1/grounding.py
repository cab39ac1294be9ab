"""Where a `/v1` chat's context comes from: the project's store (a chat's, and a response's
without `file_search`), or the stores a response's `file_search` names, each searched by
:func:`~gateway.clients.v1.retrieve.search_store` with its own settings; their hits merged into
one list, rendered by the one context block (`retrieval.context`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings

from gateway.clients.injection import query_text
from gateway.clients.ledger import Call, Spend
from gateway.clients.query_rewrite import retrieval_query
from gateway.clients.v1.retrieve import search_store
from gateway.clients.v1.spend import query_spend
from gateway.connections.failover import Plan
from ragmux.core.errors import ServiceError
from retrieval import context as rag_context
from retrieval.filters import Filter
from retrieval.search import Hit
from stores.models import RagStore

logger = logging.getLogger("ragmux.gateway.v1")


@dataclass
class Grounding:
    """The stores a chat is grounded in, what their searches are given (``top_k`` None: each
    store's own), and once :func:`ground` has run, the query and the passages put in the context,
    in the order of their ``[n]`` labels."""

    stores: list[RagStore]
    filters: Filter | None = None
    top_k: int | None = None
    query: str = ""
    hits: list[Hit] = field(default_factory=list)
    # How many of the stores could not be searched (their reasons are on the call's row).
    failed: int = 0

    @classmethod
    def of_project(cls, call: Call, filters: Filter | None) -> Grounding:
        store = call.project.store
        return cls([] if store is None else [store], filters)

    def query_spends(self, messages: list[dict]) -> list[Spend]:
        """The embedding each store's search of the chat's query may cost, for the reservation."""
        query = query_text(messages)
        return [query_spend(store, query) for store in self.stores] if query else []

    async def found(self) -> None:
        """Called once the passages are chosen, before the upstream is asked: what a subclass
        reads of them is read while the call can still be refused whole."""

    def limit(self) -> int:
        """How many passages the merged list keeps: ``top_k``, else the largest store's own."""
        return self.top_k or max(store.top_k for store in self.stores)


def interleaved(ranked: Sequence[Sequence[Hit]], limit: int) -> list[Hit]:
    """Several stores' hits as one list: their firsts (in the order the stores were named), then
    their seconds, and so on, a chunk found twice kept once, cut to ``limit``. Stores search with
    their own modes, backends and rerankers, so their scores are on different scales: only each
    store's own order is comparable."""
    merged: dict[int, Hit] = {}
    for rank in range(max((len(hits) for hits in ranked), default=0)):
        for hits in ranked:
            if rank < len(hits):
                merged.setdefault(hits[rank].chunk_id, hits[rank])
    return list(merged.values())[:limit]


async def _search(call: Call, grounding: Grounding, store: RagStore) -> list[Hit]:
    """One store's hits; its trouble is said in the call's log row, and it adds none."""
    overrides = {"filters": grounding.filters, "top_k": grounding.top_k}
    try:
        result = await search_store(call, store, grounding.query, overrides, search_timeout=settings.SEARCH_TIMEOUT)
    except TimeoutError:
        reason = f"retrieval took longer than SEARCH_TIMEOUT ({settings.SEARCH_TIMEOUT:g}s)"
    except ServiceError as exc:
        reason = exc.message
    except Exception:
        logger.exception("retrieval for project %s in store %s failed", call.project.pk, store.pk)
        reason = "internal error in retrieval (see the server log)"
    else:
        return result.hits
    grounding.failed += 1
    if len(grounding.stores) > 1:
        reason = f"store {store.name}: {reason}"
    call.rag_skipped_reason = "; ".join(filter(None, (call.rag_skipped_reason, reason)))
    logger.warning("project %s answers without context from store %s: %s", call.project.pk, store.pk, reason)
    return []


async def ground(call: Call, grounding: Grounding, messages: list[dict], plan: Plan) -> tuple[str, list[dict]]:
    """The context block and its sources (entry n is the passage labelled ``[n]``), the stores
    searched side by side for the project's `query_rewrite` of the messages (``plan``: the
    chat's, which condenses it); retrieval trouble leaves the chat ungrounded by that store, with
    the reason in the call's log row. The row's hits and sources are the passages put in the
    context."""
    if not grounding.stores:
        return "", []
    grounding.query = await retrieval_query(call, plan, messages)
    if not grounding.query:
        return "", []
    ranked = await asyncio.gather(*(_search(call, grounding, store) for store in grounding.stores))
    grounding.hits = interleaved(ranked, grounding.limit()) if len(ranked) > 1 else ranked[0]
    call.rag_hits, call.sources = len(grounding.hits), rag_context.sources(grounding.hits)
    await grounding.found()
    return rag_context.render_context(grounding.hits), call.sources
