"""Reranking a search's fused hits, under one fallback contract for every backend.

With reranking on, :func:`~retrieval.search.store_search` keeps the fused pool
(``max(top_k, rerank_candidates)`` hits); :func:`rerank` (or :func:`rerank_async`, on the event
loop) has the first ``rerank_candidates`` of them reordered and cuts the pool to ``top_k``:

- the passages a reranker omits follow the ones it ranked, in their fused order
  (:func:`apply_rerank_order`), so nothing is lost;
- any failure (a timeout, an error answer, a reply naming no passage) keeps the fused order, with
  ``fallback`` and the time spent finding out; through a rerank route, a failing target hands
  over to the next one, and only the last one's failure falls back;
- when nothing can rerank (no connection: none set, or the store's was deleted, which leaves
  none; a connection that does not fit the backend; a project without a chat model for ``llm``)
  the search runs unreranked and the report says ``skipped`` and why, in 0 ms; so does a pool of
  fewer than two hits, which needs no reranking;
- the latency is None only when reranking is off.

Which connection reranks is the caller's to say (:func:`project_rerank_connection`,
:func:`store_rerank_connection`): a project's request reranks ``llm`` with its own chat model, a
search outside one (the dashboard, ``/v1/rerank``) with the store's rerank connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gateway.connections.models import ModelConnection, RouteKind
from gateway.connections.providers.rerank import (
    LLM_BACKEND,
    NoRerank,
    Reranked,
    Reranker,
    RerankUnreadable,
    reranker,
)
from gateway.connections.selectors import connection_named_by, route_named_by
from ragmux.core import metrics
from ragmux.core.errors import ServiceError, UpstreamTimeout
from retrieval.rerank_prompt import listwise_prompt
from retrieval.search import SearchResult, store_search
from stores.models import RagStore

logger = logging.getLogger("ragmux.retrieval.rerank")
T = TypeVar("T")

FEWER_THAN_TWO = "fewer than two candidates: nothing to reorder"


def apply_rerank_order(items: Sequence[T], order: Sequence[int]) -> list[T]:
    """``items`` in the reranker's ``order`` (indices; repeated and out-of-range ones ignored),
    followed by the items it left out, in their original order."""
    ranked = [i for i in dict.fromkeys(order) if 0 <= i < len(items)]
    named = set(ranked)
    return [items[i] for i in ranked] + [item for i, item in enumerate(items) if i not in named]


def failure_reason(exc: Exception) -> str:
    """The ``reason`` label of ragmux_rag_rerank_failures_total for a failed rerank."""
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if isinstance(exc, RerankUnreadable):
        return "parse"
    if isinstance(exc, NoRerank):
        return "unavailable"
    return "upstream"


@dataclass
class RerankReport:
    """What became of a search's rerank (the search response's rerank fields)."""

    backend: str
    reranked: bool = False
    fallback: bool = False
    latency_ms: int = 0
    # Why nothing reranked, when nothing could (not a failure): `rerank_skipped_reason`.
    skipped_reason: str = ""
    # Why the rerank failed and the fused order stands (the last target's failure, with the
    # upstream's HTTP status when it answered one): `rerank_fallback_reason`.
    fallback_reason: str = ""
    # The connection that ran the rerank and what it spent, for pricing (set when it answered).
    connection: ModelConnection | None = None
    spent: Reranked | None = None
    # What targets whose replies could not be used were billed all the same (their connections).
    billed: list[tuple[ModelConnection, Reranked]] = field(default_factory=list)

    @property
    def skipped(self) -> bool:
        return bool(self.skipped_reason)


@dataclass(frozen=True)
class RerankConnection:
    """The connection a search reranks with, or why there is none; through a rerank route, the
    route's later targets, tried in order when the one before fails."""

    connection: ModelConnection | None
    missing_reason: str = ""
    alternates: tuple[ModelConnection, ...] = ()

    @property
    def connections(self) -> list[ModelConnection]:
        return [] if self.connection is None else [self.connection, *self.alternates]


NO_RERANK_TARGET = "the store has no rerank connection or route (none was set, or it was deleted)"


def _route_choice(route_id: int) -> RerankConnection:
    route = route_named_by(route_id, field="rerank_route_id")
    if route.kind != RouteKind.RERANK:
        # Its kind may have changed since the store named it: the search runs unreranked and says why.
        return RerankConnection(None, f"the route {route.name!r} is a {route.kind} route, not a rerank route")
    targets = [target.connection for target in route.targets.select_related("connection").order_by("position")]
    if not targets:
        return RerankConnection(None, f"the rerank route {route.name!r} has no targets")
    return RerankConnection(targets[0], alternates=tuple(targets[1:]))


def store_rerank_connection(store: RagStore, result: SearchResult) -> RerankConnection:
    """Outside a project's request every backend reranks with the store's rerank connection or
    route (or this call's override, which must exist); a store without one does not guess one."""
    connection_id, route_id = result.options.rerank_connection_id, result.options.rerank_route_id
    if route_id is not None:
        return _route_choice(route_id)
    if connection_id is None:
        return RerankConnection(None, NO_RERANK_TARGET)
    if connection_id == store.rerank_connection_id:
        return RerankConnection(store.rerank_connection)
    return RerankConnection(connection_named_by(connection_id, field="rerank_connection_id"))


def project_rerank_connection(
    store: RagStore, result: SearchResult, *, chat_connection: ModelConnection | None
) -> RerankConnection:
    """In a project's request (chat, `/v1/retrieve`) `llm` reranks with the project's own chat
    model (the first target of its chat route, when it chats through one); the API backends with
    the store's rerank connection."""
    if result.options.rerank_backend != LLM_BACKEND:
        return store_rerank_connection(store, result)
    if chat_connection is None:
        return RerankConnection(None, "the project has no chat connection to rerank with")
    return RerankConnection(chat_connection)


class _Rerank:
    """One search's rerank: what to send, and how the result, or a failure, lands in it."""

    def __init__(self, result: SearchResult, choice: RerankConnection):
        options = result.options
        self.result = result
        self.started = time.monotonic()
        self.report = RerankReport(backend=options.rerank_backend)
        self.pool = result.hits[: options.rerank_candidates]
        self.top_n = min(options.top_k, len(self.pool))
        # The rerankers to try in order (a route's targets that fit the backend), each with its connection.
        self.rerankers: list[tuple[ModelConnection, Reranker]] = []
        if len(self.pool) < 2:
            self._skip(FEWER_THAN_TWO)
        elif choice.connection is None:
            self._unavailable(choice.missing_reason)
        else:
            refusals = []
            for connection in choice.connections:
                try:
                    self.rerankers.append(
                        (connection, reranker(connection, backend=options.rerank_backend, prompt=listwise_prompt))
                    )
                except NoRerank as exc:
                    refusals.append(exc.message)
            if not self.rerankers:
                self._unavailable(refusals[0])

    @property
    def passages(self) -> list[str]:
        return [hit.content for hit in self.pool]

    def _skip(self, reason: str) -> None:
        self.report.skipped_reason = reason
        self._finish(self.result.hits)

    def _unavailable(self, reason: str) -> None:
        logger.warning("search runs without reranking (%s backend): %s", self.report.backend, reason)
        metrics.increment(metrics.RERANK_FAILURES, backend=self.report.backend, reason="unavailable")
        self._skip(reason)

    def ranked(self, connection: ModelConnection, spent: Reranked) -> None:
        self.report.reranked, self.report.connection, self.report.spent = True, connection, spent
        for ranked in spent.ranking:
            self.pool[ranked.index].rerank_score = ranked.relevance_score
        reordered = apply_rerank_order(self.pool, spent.order)
        self._finish(reordered + self.result.hits[len(self.pool) :])

    def target_failed(self, connection: ModelConnection, exc: Exception) -> None:
        """One target's failure, counted; the next target (if any) is tried."""
        if isinstance(exc, ServiceError):
            logger.warning("rerank (%s) by %s failed: %s", self.report.backend, connection.name, exc.message)
            self.report.fallback_reason = f"{connection.name}: {exc.message}"
        else:
            logger.exception("rerank (%s) by %s failed", self.report.backend, connection.name)
            self.report.fallback_reason = f"{connection.name}: internal error in the rerank (see the server log)"
        metrics.increment(metrics.RERANK_FAILURES, backend=self.report.backend, reason=failure_reason(exc))
        if isinstance(exc, RerankUnreadable) and exc.spent is not None:
            self.report.billed.append((connection, exc.spent))

    def failed(self) -> None:
        """Every target failed: the fused order stands, with the flag."""
        self.report.fallback = True
        self._finish(self.result.hits)

    def _finish(self, hits: list) -> None:
        elapsed = time.monotonic() - self.started
        if not self.report.skipped:
            self.report.latency_ms = round(elapsed * 1000)
        metrics.observe(metrics.RERANK_SECONDS, elapsed, backend=self.report.backend)
        self.result.hits = hits[: self.result.options.top_k]
        self.result.rerank = self.report


def rerank(result: SearchResult, *, query: str, choice: RerankConnection) -> None:
    """Reranks ``result`` in place when its options ask for it (see the module's contract); a
    failing target hands over to the next one, if the choice has more."""
    if not result.options.rerank:
        return
    attempt = _Rerank(result, choice)
    for connection, ranker in attempt.rerankers:
        try:
            spent = ranker.rerank(query, attempt.passages, top_n=attempt.top_n)
        except Exception as exc:  # noqa: BLE001 - the contract: any failure keeps the fused order
            attempt.target_failed(connection, exc)
        else:
            attempt.ranked(connection, spent)
            return
    if attempt.rerankers:
        attempt.failed()


async def rerank_async(result: SearchResult, *, query: str, choice: RerankConnection) -> None:
    """:func:`rerank` from the event loop: a caller that is cancelled ends the upstream call."""
    if not result.options.rerank:
        return
    attempt = _Rerank(result, choice)
    for connection, ranker in attempt.rerankers:
        try:
            spent = await ranker.rerank_async(query, attempt.passages, top_n=attempt.top_n)
        except Exception as exc:  # noqa: BLE001 - the contract: any failure keeps the fused order
            attempt.target_failed(connection, exc)
        else:
            attempt.ranked(connection, spent)
            return
    if attempt.rerankers:
        attempt.failed()


def reranked_search(*, store: RagStore, query: str, overrides: dict[str, Any] | None = None) -> SearchResult:
    """:func:`~retrieval.search.store_search` then the rerank, for a search outside a project's
    request (the search endpoint, the dashboard's search compare, a bench): every backend reranks
    with the store's rerank connection, or the call's override."""
    result = store_search(store=store, query=query, overrides=overrides)
    rerank(result, query=query, choice=store_rerank_connection(store, result))
    return result
