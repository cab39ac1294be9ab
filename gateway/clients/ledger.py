"""The usage ledger: one `request_logs` row per `/v1` call, priced from the price table.

A finished call only queues its record; one writer thread per process writes the queue in
batches, so logging adds nothing to a client's latency and little to the process's work: a
batch is one price query and one INSERT (its metrics are kept in the process; what that saves
is in docs/benchmarks.md, issue 43). A batch collects for at most ``FLUSH_SECONDS`` after its
first record, so a row is in the database well within the second the issue allows; the web
process's shutdown waits for the queue (:func:`flush`, from the ASGI lifespan in ragmux/asgi.py).

While the database is unavailable the writer keeps the records it could not write and tries
again with a growing pause, so a short outage loses no accepted call's row; their metrics move
when the rows are written. A process keeps at most ``MAX_UNWRITTEN`` records: past that, new
calls are not logged, and the log says so when it starts and how many when it ends.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from django.db import close_old_connections, connections

from gateway.clients.models import REASON_MAX_LENGTH, GatewayKey, Project, RequestLog
from gateway.clients.usage import Admission, Settlement, settle
from gateway.connections.models import ModelPrice
from gateway.connections.pricing import PRICE_TABLE, UNPRICED, Cost, matching_price, rerank_cost, token_cost
from gateway.connections.providers.rerank import Reranked
from ragmux.core import metrics
from ragmux.core.errors import database_unavailable

logger = logging.getLogger("ragmux.gateway.ledger")
FLUSH_SECONDS = 0.1
MAX_BATCH = 500
# About 20 KB a record at most (its sources), so at most a few hundred MB for a long outage.
MAX_UNWRITTEN = 20_000
# The pause before a batch the database refused is tried again: doubled each time up to the last.
RETRY_FIRST_SECONDS = 0.25
RETRY_MAX_SECONDS = 5.0


@dataclass(frozen=True)
class Spend:
    """Tokens spent through one connection, priced with that connection's row."""

    provider_type: str
    model: str
    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    # A rerank's spend, priced by `pricing.rerank_cost` with the search units it was billed (None:
    # the reranker bills by token, or reported none).
    rerank: bool = False
    search_units: int | None = None

    @classmethod
    def of_rerank(cls, provider_type: str, model: str, reranked: Reranked) -> Spend:
        return cls(
            provider_type,
            model,
            reranked.input_tokens,
            reranked.output_tokens,
            rerank=True,
            search_units=reranked.search_units,
        )

    def cost(self, row: ModelPrice | None) -> Cost:
        if self.rerank:
            return rerank_cost(
                row,
                search_units=self.search_units,
                prompt_tokens=self.prompt_tokens,
                completion_tokens=self.completion_tokens,
            )
        return token_cost(
            row,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )


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
    cache_write_tokens: int = 0
    embedding_tokens: int = 0
    rerank_tokens: int = 0
    tokens_estimated: bool = False
    rag_hits: int = 0
    sources: list[dict] = field(default_factory=list)
    # Why a chat was answered without the store's context ("" when it was searched).
    rag_skipped_reason: str = ""
    # What became of its rerank, and why it did not rerank (RequestLog.rerank_outcome).
    rerank_outcome: str = ""
    rerank_reason: str = ""
    # Its `llm` query rewrite: the tokens the condensation spent, and why it fell back.
    query_rewrite_tokens: int = 0
    query_rewrite_reason: str = ""
    streamed: bool = False
    ttfb_ms: int | None = None
    error: str = ""
    spends: list[Spend] = field(default_factory=list)
    # Set when a streamed response took over: the relay finishes the call when the stream ends.
    relaying: bool = False
    finished: bool = False
    # A routed chat's route, the target that answered (or was tried last) and its attempts.
    route_name: str = ""
    target: str = ""
    attempts: list[dict] = field(default_factory=list)
    # Its place in the usage counters (gateway.clients.limiter): released when its answer ends,
    # else settled when its row is written.
    admission: Admission | None = None
    # The `x-ratelimit-*` and `x-ragmux-budget-*` headers of its limits.
    limit_headers: dict[str, str] = field(default_factory=dict)

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def mark_first_byte(self) -> None:
        if self.ttfb_ms is None:
            self.ttfb_ms = self.elapsed_ms()

    def finish(self, status: int, error: str = "") -> None:
        """Records the outcome once and queues the row."""
        if self.finished:
            return
        self.finished = True
        self.status = status
        self.error = error[:REASON_MAX_LENGTH]
        self.rag_skipped_reason = self.rag_skipped_reason[:REASON_MAX_LENGTH]
        self.rerank_reason = self.rerank_reason[:REASON_MAX_LENGTH]
        self.query_rewrite_reason = self.query_rewrite_reason[:REASON_MAX_LENGTH]
        _writer.put(_Finished(self, self.elapsed_ms()))


@dataclass(frozen=True)
class _Finished:
    call: Call
    latency_ms: int


@dataclass(frozen=True)
class _Refused:
    """A call without a valid key: counted in the metrics, not logged (there is no project)."""

    endpoint: str


def count_refusal(endpoint: str) -> None:
    _writer.put(_Refused(endpoint))


def pending_writes() -> int:
    """Records queued but not written yet."""
    return _writer.unwritten


def flush(timeout: float) -> bool:
    """Waits until every queued record is written; False if ``timeout`` seconds were not enough."""
    return _writer.wait_idle(timeout)


def price(spends: list[Spend], rows: list[ModelPrice]) -> tuple[int, str]:
    """The cost of the spends in micro-dollars, and whether the call's main spends all had a price
    row. A rerank inside a call that spent on something else (a chat, a query's embedding) adds 0
    when it has no price and leaves the source to the rest; a call that only reranked (`/v1/rerank`)
    is unpriced like any other without a price."""
    total, source = 0, PRICE_TABLE
    only_reranks = all(spend.rerank for spend in spends)
    for spend in spends:
        cost = spend.cost(matching_price([r for r in rows if r.provider_type == spend.provider_type], spend.model))
        total += cost.micros
        if cost.source == UNPRICED and (only_reranks or not spend.rerank):
            source = UNPRICED
    return total, source


def _row(finished: _Finished, prices: list[ModelPrice]) -> RequestLog:
    call = finished.call
    cost_micros, cost_source = price(call.spends, prices)
    return RequestLog(
        project_id=call.project.pk,
        key_id=call.key.pk,
        endpoint=call.endpoint,
        model=call.model,
        status_code=call.status,
        prompt_tokens=call.prompt_tokens,
        completion_tokens=call.completion_tokens,
        embedding_tokens=call.embedding_tokens,
        rerank_tokens=call.rerank_tokens,
        cached_prompt_tokens=call.cached_tokens,
        cache_write_tokens=call.cache_write_tokens,
        tokens_estimated=call.tokens_estimated,
        cost_micros=cost_micros,
        cost_source=cost_source,
        latency_ms=finished.latency_ms,
        ttfb_ms=call.ttfb_ms,
        rag_hits=call.rag_hits,
        sources=call.sources,
        rag_skipped_reason=call.rag_skipped_reason,
        rerank_outcome=call.rerank_outcome,
        rerank_reason=call.rerank_reason,
        query_rewrite_tokens=call.query_rewrite_tokens,
        query_rewrite_reason=call.query_rewrite_reason,
        streamed=call.streamed,
        error=call.error,
        route_name=call.route_name,
        target=call.target,
        attempts=call.attempts,
    )


def _insert(rows: list[RequestLog]) -> list[RequestLog]:
    """Writes the rows: all at once, or, when the batch fails (a project deleted meanwhile), each
    that can be written alone, so one bad row loses no other. Returns the rows the database was
    unavailable for, to be written later."""
    try:
        RequestLog.objects.bulk_create(rows)
        return []
    except Exception as exc:
        if database_unavailable(exc) is not None:
            return rows
        logger.exception("request log batch of %d rows failed; writing them one by one", len(rows))
    for index, row in enumerate(rows):
        try:
            row.save(force_insert=True)
        except Exception as exc:
            if database_unavailable(exc) is not None:
                return rows[index:]
            # A lost row must never turn into a failed call; it is loud in the logs instead.
            logger.exception("request log row not written (project %s, %s)", row.project_id, row.endpoint)
    return []


def _costs(finished: list[_Finished], rows: list[RequestLog]) -> list[int]:
    """Each call's price in micro-dollars, 0 for every call of a batch that could not be priced."""
    return [row.cost_micros for row in rows] if rows else [0] * len(finished)


def settlement(call: Call, admission: Admission, cost_micros: int) -> Settlement:
    """What an admitted call spent, as the usage counters take it."""
    return Settlement(
        admission=admission,
        prompt_tokens=call.prompt_tokens + call.embedding_tokens + call.rerank_tokens + call.query_rewrite_tokens,
        completion_tokens=call.completion_tokens,
        cost_micros=cost_micros,
    )


def _settle(finished: list[_Finished], costs: list[int]) -> None:
    """The admitted calls' usage into the counters, priced as their rows are (a call released when
    its answer ended has no admission left to settle)."""
    settle(
        settlements=[
            settlement(record.call, record.call.admission, cost_micros)
            for record, cost_micros in zip(finished, costs, strict=True)
            if record.call.admission is not None
        ]
    )


def write(records: list[_Finished | _Refused]) -> list[_Finished]:
    """Writes one batch: its rows, the usage counters they settle, then the metrics of every
    record in it. Returns the records whose rows wait for the database: they settle and their
    metrics move once they are written, so a retried record is counted once."""
    finished = [record for record in records if isinstance(record, _Finished)]
    rows: list[RequestLog] = []
    waiting: list[_Finished] = []
    if finished:
        close_old_connections()
        try:
            types = {spend.provider_type for record in finished for spend in record.call.spends}
            prices = list(ModelPrice.objects.filter(provider_type__in=types)) if types else []
            rows = [_row(record, prices) for record in finished]
            unwritten = {id(row) for row in _insert(rows)}
            waiting = [record for record, row in zip(finished, rows, strict=True) if id(row) in unwritten]
        except Exception as exc:
            if database_unavailable(exc) is None:
                logger.exception("request log batch of %d rows not written", len(finished))
            else:
                waiting = finished
        held = {id(record) for record in waiting}
        done = [
            (record, cost)
            for record, cost in zip(finished, _costs(finished, rows), strict=True)
            if id(record) not in held
        ]
        try:
            # A batch that could not be priced still settles its tokens and frees its reservations.
            _settle([record for record, _ in done], [cost for _, cost in done])
        except Exception:
            # The reservations stay: until their windows end they count against the limits.
            logger.exception("usage counters of %d calls not settled", len(done))
        finally:
            # The writer thread outlives every request; its connection goes back to the pool.
            connections.close_all()
    else:
        done = []
    _count(records, done)
    return waiting


def _count(records: list[_Finished | _Refused], done: list[tuple[_Finished, int]]) -> None:
    """The metrics of a batch's refused records and of its written ones, with their costs."""
    for record in records:
        if isinstance(record, _Refused):
            metrics.increment(metrics.V1_REQUESTS, endpoint=record.endpoint, status="401")
    # The costs of a batch that could not be priced are unknown, not zero: they are not counted.
    for record, cost_micros in done:
        call = record.call
        labels = {"endpoint": call.endpoint, "status": str(call.status)}
        metrics.increment(metrics.V1_REQUESTS, **labels)
        metrics.observe(metrics.V1_REQUEST_SECONDS, record.latency_ms / 1000, endpoint=call.endpoint)
        if cost_micros:
            metrics.increment(metrics.V1_COST_MICROS, cost_micros, **labels)
        for kind, tokens in (
            ("prompt", call.prompt_tokens),
            ("completion", call.completion_tokens),
            ("embedding", call.embedding_tokens),
            ("rerank", call.rerank_tokens),
            ("query_rewrite", call.query_rewrite_tokens),
        ):
            if tokens:
                metrics.increment(metrics.V1_TOKENS, tokens, endpoint=call.endpoint, kind=kind)


class _Writer:
    """The one thread of a process that writes queued records, a batch at a time."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Finished | _Refused] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self.unwritten = 0
        # Records refused since the backlog reached MAX_UNWRITTEN.
        self.dropped = 0

    def put(self, record: _Finished | _Refused) -> None:
        with self._lock:
            if self.unwritten >= MAX_UNWRITTEN:
                self.dropped += 1
                if self.dropped == 1:
                    logger.error(
                        "%d request log records wait for the database, the most a process keeps: "
                        "calls are not logged until it is back",
                        MAX_UNWRITTEN,
                    )
                return
            self.unwritten += 1
            if self._thread is None:
                # Daemon: a process that exits without flush() (a test's server) must not hang.
                self._thread = threading.Thread(target=self._run, name="request-log-writer", daemon=True)
                self._thread.start()
        self._queue.put(record)

    def _next_batch(self, waiting: list[_Finished]) -> list[_Finished | _Refused]:
        """The records still waiting for the database first, then the queue's."""
        records: list[_Finished | _Refused] = list(waiting)
        if not records:
            records.append(self._queue.get())
            # Asleep, not waiting on the queue: a waiting thread would be woken by every record,
            # a thread switch (and an exchange of the interpreter lock) per call.
            time.sleep(FLUSH_SECONDS)
        while len(records) < MAX_BATCH:
            try:
                records.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return records

    def _run(self) -> None:
        waiting: list[_Finished] = []
        pause = RETRY_FIRST_SECONDS
        while True:
            records = self._next_batch(waiting)
            waiting = []
            try:
                waiting = write(records)
            except Exception:
                logger.exception("request log batch failed")
            finally:
                with self._lock:
                    self.unwritten -= len(records) - len(waiting)
                    self._idle.notify_all()
            if waiting:
                if pause == RETRY_FIRST_SECONDS:
                    logger.warning("the database is unavailable: request log rows wait to be written")
                time.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_SECONDS)
            elif pause > RETRY_FIRST_SECONDS:
                pause = RETRY_FIRST_SECONDS
                self._say_backlog_written()

    def _say_backlog_written(self) -> None:
        with self._lock:
            dropped, self.dropped = self.dropped, 0
        if dropped:
            logger.error("the database is back; %d calls during its absence were not logged", dropped)
        else:
            logger.warning("the database is back; request log rows are written again")

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self.unwritten == 0, timeout)


_writer = _Writer()
