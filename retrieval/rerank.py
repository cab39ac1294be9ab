"""Reranking a search's fused hits, under one fallback contract for every backend.

With reranking on, :func:`~retrieval.search.store_search` keeps the fused pool
(``max(top_k, rerank_candidates)`` hits); :func:`rerank` (or :func:`rerank_async`, on the event
loop) has the first ``rerank_candidates`` of them reordered and cuts the pool to ``top_k``:

- the passages a reranker omits follow the ones it ranked, in their fused order
  (:func:`apply_rerank_order`), so nothing is lost;
- any failure (a timeout, an error answer, a reply naming no passage) keeps the fused order, with
  ``fallback`` and the time spent finding out; a rerank route's targets are run by the one
  failover engine (`gateway.connections.failover`, as `/v1/rerank` and a chat run theirs: by
  the route's strategy and weights, cooling targets skipped, a failure that fails over handing
  over to the next target), and only the call's last failure falls back;
- when nothing can rerank (no connection: none set, or the store's was deleted, which leaves
  none; a connection that does not fit the backend; a project without a chat model for ``llm``)
  the search runs unreranked and the report says ``skipped`` and why, in 0 ms; so does a pool of
  fewer than two hits, which needs no reranking;
- the latency is None only when reranking is off.

Which connection or route reranks is the caller's to say (:func:`store_rerank_connection`, or
`retrieval.retrieve` in a project's request, where ``llm`` reranks with the project's own chat
model).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gateway.connections import failover
from gateway.connections.failover import Attempts, Plan, RouteCoolingDown, Target
from gateway.connections.models import ModelConnection, RouteKind
from gateway.connections.providers.rerank import (
    NoRerank,
    Reranked,
    Reranker,
    RerankUnreadable,
    estimated_rerank,
    reranker,
)
from gateway.connections.selectors import connection_named_by, route_named_by
from ragmux.core import metrics
from ragmux.core.errors import ServiceError, UpstreamTimeout
from ragmux.core.offloop import on_thread_loop
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
    # What the rerank spent, for pricing, by the target (connection and model) that spent it:
    # the replies that could not be used (billed all the same), then the ranking's.
    spends: list[tuple[Target, Reranked]] = field(default_factory=list)

    @property
    def skipped(self) -> bool:
        return bool(self.skipped_reason)


@dataclass(frozen=True)
class RerankChoice:
    """Who a search reranks with: one connection, or a rerank route's targets (run by the
    failover engine, as `/v1/rerank` runs them); or why no one can."""

    plan: Plan | None
    missing_reason: str = ""

    @classmethod
    def of_connection(cls, connection: ModelConnection | None, missing_reason: str) -> RerankChoice:
        return cls(None if connection is None else Plan.of_connection(connection), missing_reason)


NO_RERANK_TARGET = "the store has no rerank connection or route (none was set, or it was deleted)"


def _route_choice(route_id: int) -> RerankChoice:
    route = route_named_by(route_id, field="rerank_route_id")
    if route.kind != RouteKind.RERANK:
        # Its kind may have changed since the store named it: the search runs unreranked and says why.
        return RerankChoice(None, f"the route {route.name!r} is a {route.kind} route, not a rerank route")
    targets = list(route.targets.select_related("connection").order_by("position"))
    if not targets:
        return RerankChoice(None, f"the rerank route {route.name!r} has no targets")
    return RerankChoice(Plan.of_route(route, targets))


def store_rerank_connection(store: RagStore, result: SearchResult) -> RerankChoice:
    """Every backend but a project's `llm` reranks with the store's rerank connection or route (or
    this call's override, which must exist); a store without one does not guess one."""
    connection_id, route_id = result.options.rerank_connection_id, result.options.rerank_route_id
    if route_id is not None:
        return _route_choice(route_id)
    if connection_id is None:
        return RerankChoice(None, NO_RERANK_TARGET)
    if connection_id == store.rerank_connection_id:
        return RerankChoice.of_connection(store.rerank_connection, NO_RERANK_TARGET)
    return RerankChoice.of_connection(connection_named_by(connection_id, field="rerank_connection_id"), "")


class _Rerank:
    """One search's rerank: what to send, and how the result, or a failure, lands in it."""

    def __init__(self, result: SearchResult, choice: RerankChoice, spends: list[tuple[Target, Reranked]]):
        options = result.options
        self.result = result
        self.started = time.monotonic()
        self.report = RerankReport(backend=options.rerank_backend, spends=spends)
        self.pool = result.hits[: options.rerank_candidates]
        self.top_n = min(options.top_k, len(self.pool))
        # The reranker of each target that fits the backend; the plan of those targets alone.
        self.rerankers: dict[Target, Reranker] = {}
        self.plan: Plan | None = None
        if len(self.pool) < 2:
            self._skip(FEWER_THAN_TWO)
        elif choice.plan is None:
            self._unavailable(choice.missing_reason)
        else:
            refusals = []
            for target in choice.plan.targets:
                try:
                    self.rerankers[target] = reranker(
                        target.connection,
                        backend=options.rerank_backend,
                        model=target.model,
                        prompt=listwise_prompt,
                        timeout=target.first_byte_timeout,
                    )
                except NoRerank as exc:
                    refusals.append(exc.message)
            if self.rerankers:
                self.plan = replace(choice.plan, targets=list(self.rerankers))
            else:
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

    def ranked(self, target: Target, spent: Reranked) -> None:
        self.report.reranked = True
        self.report.spends.append((target, spent))
        for ranked in spent.ranking:
            self.pool[ranked.index].rerank_score = ranked.relevance_score
        reordered = apply_rerank_order(self.pool, spent.order)
        self._finish(reordered + self.result.hits[len(self.pool) :])

    def target_failed(self, target: Target, exc: Exception) -> None:
        """One target's failure, counted; the engine tries the next target (if any, and if the
        failure is one a route fails over on)."""
        name = target.connection.name
        if isinstance(exc, ServiceError):
            logger.warning("rerank (%s) by %s failed: %s", self.report.backend, name, exc.message)
            self.report.fallback_reason = f"{name}: {exc.message}"
        else:
            logger.exception("rerank (%s) by %s failed", self.report.backend, name)
            self.report.fallback_reason = f"{name}: internal error in the rerank (see the server log)"
        metrics.increment(metrics.RERANK_FAILURES, backend=self.report.backend, reason=failure_reason(exc))
        if isinstance(exc, RerankUnreadable) and exc.spent is not None:
            self.report.spends.append((target, exc.spent))

    def failed(self, exc: Exception) -> None:
        """No target answered: the fused order stands, with the flag."""
        if isinstance(exc, RouteCoolingDown):
            self.report.fallback_reason = exc.message
            metrics.increment(metrics.RERANK_FAILURES, backend=self.report.backend, reason=failure_reason(exc))
        self.report.fallback = True
        self._finish(self.result.hits)

    def _finish(self, hits: list) -> None:
        elapsed = time.monotonic() - self.started
        if not self.report.skipped:
            self.report.latency_ms = round(elapsed * 1000)
        metrics.observe(metrics.RERANK_SECONDS, elapsed, backend=self.report.backend)
        self.result.hits = hits[: self.result.options.top_k]
        self.result.rerank = self.report


async def rerank_async(
    result: SearchResult,
    *,
    query: str,
    choice: RerankChoice,
    spends: list[tuple[Target, Reranked]] | None = None,
) -> None:
    """Reranks ``result`` in place when its options ask for it (see the module's contract), on the
    event loop: a caller that is cancelled ends the upstream call. A route's targets are run by
    the failover engine (its strategy, weights and cooldowns). What the rerank spends is added to
    ``spends`` as it is spent (its report's list when None); a cancelled rerank adds the estimate
    of the call it was waiting for."""
    if not result.options.rerank:
        return
    attempt = _Rerank(result, choice, [] if spends is None else spends)
    if attempt.plan is None:
        return
    attempts = Attempts(attempt.plan.targets[0])
    passages = attempt.passages

    async def ranked(ranker: Reranker, once) -> Reranked:
        try:
            return await ranker.rerank_async(query, passages, top_n=attempt.top_n)
        except asyncio.CancelledError:
            estimate = estimated_rerank(attempt.report.backend, query, passages)
            attempt.report.spends.append((attempts.current, estimate))
            raise
        except Exception as exc:  # noqa: BLE001 - the contract: any failure keeps the fused order
            attempt.target_failed(attempts.current, exc)
            raise

    try:
        spent = await failover.answer(attempt.plan, attempts, ranked, open_target=attempt.rerankers.__getitem__)
    except Exception as exc:  # noqa: BLE001 - the contract: any failure keeps the fused order
        attempt.failed(exc)
    else:
        attempt.ranked(attempts.current, spent)


def rerank(result: SearchResult, *, query: str, choice: RerankChoice) -> None:
    """:func:`rerank_async` from synchronous code (the search endpoint, the dashboard, an
    evaluation run), so every rerank goes through the one failover engine."""
    if result.options.rerank:
        on_thread_loop(rerank_async(result, query=query, choice=choice))


def reranked_search(*, store: RagStore, query: str, overrides: dict[str, Any] | None = None) -> SearchResult:
    """:func:`~retrieval.search.store_search` then the rerank, for a search outside a project's
    request (the search endpoint, the dashboard's search compare, a bench): every backend reranks
    with the store's rerank connection, or the call's override."""
    result = store_search(store=store, query=query, overrides=overrides)
    rerank(result, query=query, choice=store_rerank_connection(store, result))
    return result
