"""The metrics of ragmux's own work: every one defined here, each process keeping its own.

They are prometheus_client counters and histograms in the memory of the process that does the
work, so neither a Redis outage nor a Redis restart can lose an increment or roll a counter back.
Processes on one host that serve one `/metrics` share a folder in prometheus_client's
multiprocess mode (PROMETHEUS_MULTIPROC_DIR, which `ragmux serve` and `ragmux worker
--metrics-port` set for the processes they start, wiped at start): the web server's workers
(with the worker and scheduler of `ragmux serve`) are summed by `/metrics` (`ragmux.views`), a
Celery worker's pool by the port it serves. Gauges that describe the database are computed on
each scrape by the app that owns the rows (`stores.metrics`). A metrics failure never fails the
work being measured.
"""

from __future__ import annotations

import logging
import os

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

logger = logging.getLogger("ragmux.core.metrics")

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

V1_REQUESTS = Counter(
    "ragmux_v1_requests_total", "/v1 calls by endpoint and status, refused keys included", ["endpoint", "status"]
)
V1_REQUEST_SECONDS = Histogram(
    "ragmux_v1_request_seconds", "Duration of logged /v1 calls by endpoint", ["endpoint"], buckets=BUCKETS
)
V1_COST_MICROS = Counter(
    "ragmux_v1_cost_micros_total", "Cost of /v1 calls in micro-dollars, from the price table", ["endpoint", "status"]
)
V1_TOKENS = Counter("ragmux_v1_tokens_total", "Tokens of /v1 calls by endpoint and kind", ["endpoint", "kind"])
SEARCH_SECONDS = Histogram(
    "ragmux_search_seconds",
    "Duration of store searches by mode and backend (query embedding excluded)",
    ["mode", "backend"],
    buckets=BUCKETS,
)
RERANK_SECONDS = Histogram(
    "ragmux_rag_rerank_duration_seconds",
    "Duration of search reranks by backend, skipped and failed ones included",
    ["backend"],
    buckets=BUCKETS,
)
RERANK_FAILURES = Counter(
    "ragmux_rag_rerank_failures_total",
    "Reranks that kept the fused order, by backend and reason (timeout, upstream, parse, unavailable)",
    ["backend", "reason"],
)
INGEST_STAGE_SECONDS = Histogram(
    "ragmux_ingest_stage_seconds",
    "Duration of ingestion stages per document (parse, chunk, embed, commit)",
    ["stage"],
    buckets=BUCKETS,
)
INGEST_EMBED_TOKENS = Counter(
    "ragmux_ingest_embed_tokens_total",
    "Embedding tokens spent by ingestion, reported by the upstream or estimated",
    ["source"],
)

LIMITS_DENIED = Counter(
    "ragmux_limits_denied_total", "/v1 calls refused by a rate limit or budget, by code and scope", ["code", "scope"]
)
LIMITS_UNCHECKED = Counter(
    "ragmux_limits_unchecked_total", "/v1 calls let through unchecked: the minute counters could not be reached"
)

ROUTE_ATTEMPTS = Counter(
    "ragmux_route_attempts_total",
    "Calls made to a route's targets, by route and outcome (ok, timeout, connect, http_5xx, http_429, ...)",
    ["route", "outcome"],
)
ROUTE_FAILOVERS = Counter(
    "ragmux_route_failovers_total", "Routed calls moved on from a failed target to the next one, by route", ["route"]
)

_failure_logged = False


def _failed(exc: Exception) -> None:
    # Once per process: a failure here (the multiprocess folder gone, the disk full) would
    # otherwise be logged by every call.
    global _failure_logged
    if not _failure_logged:
        _failure_logged = True
        logger.warning("metrics not recorded (%s); later failures are not logged", exc)


def increment(counter: Counter, amount: float = 1, **labels: str) -> None:
    try:
        (counter.labels(**labels) if labels else counter).inc(amount)
    except Exception as exc:  # noqa: BLE001 - a metrics failure never fails the work being measured
        _failed(exc)


def observe(histogram: Histogram, value: float, **labels: str) -> None:
    try:
        (histogram.labels(**labels) if labels else histogram).observe(value)
    except Exception as exc:  # noqa: BLE001 - a metrics failure never fails the work being measured
        _failed(exc)


def multiprocess_registry(folder: str) -> CollectorRegistry:
    """The metrics of every process that wrote into ``folder``, summed; those of a process that
    exited stay, so a counter of the host never falls when a worker process is replaced
    (prometheus_client's mark_process_dead only drops live gauges, which ragmux keeps none of)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=folder)
    return registry


def this_host() -> Collector:
    """The metrics of this process, or of every process sharing its multiprocess folder."""
    folder = os.environ.get(MULTIPROCESS_DIR)
    return multiprocess_registry(folder) if folder else REGISTRY
