"""The usage ledger: one `request_logs` row per `/v1` call, priced from the price table.

Rows are written after the response is on its way (a task on the event loop hands the write
to a worker thread), so logging adds nothing to a client's latency.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from gateway.clients.models import GatewayKey, Project, RequestLog
from gateway.clients.offloop import off_loop
from gateway.connections.models import ModelPrice
from gateway.connections.pricing import PRICE_TABLE, UNPRICED, matching_price, token_cost
from ragmux.core import metrics

logger = logging.getLogger("ragmux.gateway.ledger")
_writes: set[asyncio.Task] = set()


@dataclass(frozen=True)
class Spend:
    """Tokens spent through one connection, priced with that connection's row."""

    provider_type: str
    model: str
    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class Call:
    project: Project
    key: GatewayKey
    endpoint: str
    started: float = field(default_factory=time.monotonic)
    model: str = ""
    status: int = 200
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    embedding_tokens: int = 0
    tokens_estimated: bool = False
    rag_hits: int = 0
    sources: list[dict] = field(default_factory=list)
    streamed: bool = False
    ttfb_ms: int | None = None
    error: str = ""
    spends: list[Spend] = field(default_factory=list)
    # Set when a streamed response took over: the relay finishes the call when the stream ends.
    relaying: bool = False
    finished: bool = False

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def mark_first_byte(self) -> None:
        if self.ttfb_ms is None:
            self.ttfb_ms = self.elapsed_ms()

    def finish(self, status: int, error: str = "") -> None:
        """Records the outcome once and schedules the row's write."""
        if self.finished:
            return
        self.finished = True
        self.status = status
        self.error = error[:512]
        latency_ms = self.elapsed_ms()
        task = asyncio.get_running_loop().create_task(off_loop(write, self, latency_ms))
        _writes.add(task)
        task.add_done_callback(_writes.discard)


def pending_writes() -> int:
    """Rows scheduled but not written yet."""
    return len(_writes)


def price(spends: list[Spend]) -> tuple[int, str]:
    """The cost of the spends in micro-dollars, and whether every spend had a price row."""
    if not spends:
        return 0, PRICE_TABLE
    rows = list(ModelPrice.objects.filter(provider_type__in={s.provider_type for s in spends}))
    total, source = 0, PRICE_TABLE
    for spend in spends:
        row = matching_price([r for r in rows if r.provider_type == spend.provider_type], spend.model)
        cost = token_cost(
            row,
            prompt_tokens=spend.prompt_tokens,
            completion_tokens=spend.completion_tokens,
            cached_tokens=spend.cached_tokens,
        )
        total += cost.micros
        if cost.source == UNPRICED:
            source = UNPRICED
    return total, source


def write(call: Call, latency_ms: int) -> None:
    try:
        cost_micros, cost_source = price(call.spends)
        RequestLog.objects.create(
            project_id=call.project.pk,
            key_id=call.key.pk,
            endpoint=call.endpoint,
            model=call.model,
            status_code=call.status,
            prompt_tokens=call.prompt_tokens,
            completion_tokens=call.completion_tokens,
            embedding_tokens=call.embedding_tokens,
            tokens_estimated=call.tokens_estimated,
            cost_micros=cost_micros,
            cost_source=cost_source,
            latency_ms=latency_ms,
            ttfb_ms=call.ttfb_ms,
            rag_hits=call.rag_hits,
            sources=call.sources,
            streamed=call.streamed,
            error=call.error,
        )
    except Exception:
        # A lost row must never turn into a failed call; it is loud in the logs instead.
        logger.exception("request log row not written (project %s, %s)", call.project.pk, call.endpoint)
        cost_micros = 0
    labels = {"endpoint": call.endpoint, "status": str(call.status)}
    batch = metrics.Batch()  # one Redis round trip per call, not one per metric
    batch.increment("ragmux_v1_requests_total", **labels)
    batch.observe("ragmux_v1_request_seconds", latency_ms / 1000, endpoint=call.endpoint)
    if cost_micros:
        batch.increment("ragmux_v1_cost_micros_total", cost_micros, **labels)
    for kind, tokens in (
        ("prompt", call.prompt_tokens),
        ("completion", call.completion_tokens),
        ("embedding", call.embedding_tokens),
    ):
        if tokens:
            batch.increment("ragmux_v1_tokens_total", tokens, endpoint=call.endpoint, kind=kind)
    batch.send()
