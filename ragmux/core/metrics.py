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

Labels are bounded: provider types, search modes and backends, outcomes and endpoints are closed
sets, failure types come from ``upstream_errors.failure_kind``; no label comes from a client's
text, a header, a filename or an address. Who may read them is ``ragmux.core.metrics_access``.
"""

from __future__ import annotations

import logging
import os
import platform
from importlib import metadata

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

logger = logging.getLogger("ragmux.core.metrics")

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

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
RETRIEVAL_SECONDS = Histogram(
    "ragmux_rag_retrieval_duration_seconds",
    "Duration of store searches by mode and backend, the query's embedding included",
    ["mode", "backend"],
    buckets=BUCKETS,
)
QUERY_EMBED_SECONDS = Histogram(
    "ragmux_rag_embed_duration_seconds",
    "Duration of a search query's embedding by provider type, failed ones included",
    ["provider"],
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
INGEST_JOBS = Counter(
    "ragmux_ingest_jobs_total",
    "Documents a worker finished, by outcome (ready, failed, lease_lost: its claim was gone when it "
    "wrote, released: given back by a graceful stop)",
    ["outcome"],
)
INGEST_CLAIMS = Counter(
    "ragmux_ingest_claims_total", "A worker's claims on the queue, by outcome (claimed, empty, error)", ["outcome"]
)
INGEST_LEASES_LOST = Counter(
    "ragmux_ingest_lease_lost_total", "Claims a worker found gone while renewing them (expired, deleted, reprocessed)"
)
INGEST_LEASES_EXPIRED = Counter(
    "ragmux_ingest_leases_expired_total",
    "Expired claims the scheduler's sweep took back, by outcome (requeued, failed: out of attempts)",
    ["outcome"],
)

UPSTREAM_SECONDS = Histogram(
    "ragmux_gateway_upstream_duration_seconds",
    "Duration of /v1 chat calls to a provider that answered, by provider type (a stream's whole length)",
    ["provider"],
    buckets=BUCKETS,
)
FIRST_TOKEN_SECONDS = Histogram(
    "ragmux_gateway_time_to_first_token_seconds",
    "Time from a streamed /v1 chat's upstream call to its first chunk, by provider type",
    ["provider"],
    buckets=FIRST_TOKEN_BUCKETS,
)
STREAMS_ACTIVE = Gauge(
    "ragmux_gateway_streams_active",
    "Streamed /v1 chats being relayed now",
    # Summed over the host's processes; a process that died keeps its last value until the restart
    # that empties the multiprocess folder.
    multiprocess_mode="livesum",
)
UPSTREAM_ERRORS = Counter(
    "ragmux_gateway_errors_total",
    "/v1 chat calls to a provider that failed, by provider type and failure type "
    "(timeout, connect, http_5xx, http_<4xx status>, upstream_malformed, ...)",
    ["provider", "type"],
)
CLIENT_DISCONNECTS = Counter(
    "ragmux_gateway_client_disconnects_total",
    "/v1 calls whose client went away before the answer was complete (status 499), by endpoint",
    ["endpoint"],
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


def note_failure(exc: Exception) -> None:
    # Once per process: a failure here (the multiprocess folder gone, the disk full) would
    # otherwise be logged by every call.
    global _failure_logged
    if not _failure_logged:
        _failure_logged = True
        logger.warning("metrics not recorded (%s); later failures are not logged", exc)


def _record(metric: Counter | Gauge | Histogram, method: str, value: float, labels: dict[str, str]) -> None:
    try:
        getattr(metric.labels(**labels) if labels else metric, method)(value)
    except Exception as exc:  # noqa: BLE001 - a metrics failure never fails the work being measured
        note_failure(exc)


def increment(counter: Counter, amount: float = 1, **labels: str) -> None:
    _record(counter, "inc", amount, labels)


def observe(histogram: Histogram, value: float, **labels: str) -> None:
    _record(histogram, "observe", value, labels)


def move(gauge: Gauge, amount: float, **labels: str) -> None:
    """Adds ``amount`` (negative to take away) to a gauge of this process."""
    _record(gauge, "inc", amount, labels)


def put(gauge: Gauge, value: float, **labels: str) -> None:
    _record(gauge, "set", value, labels)


def _version() -> str:
    try:
        return metadata.version("ragmux")
    except metadata.PackageNotFoundError:
        return "unknown"


class BuildInfoCollector:
    """``ragmux_build_info``: always 1, its labels say which build and Python answer."""

    def describe(self):
        return []

    def collect(self):
        info = GaugeMetricFamily(
            "ragmux_build_info", "The ragmux build serving these metrics", labels=["version", "python_version"]
        )
        info.add_metric([_version(), platform.python_version()], 1)
        yield info


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
