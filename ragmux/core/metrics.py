"""Metrics shared by every ragmux process.

Workers and web processes are separate (often on separate machines), so counters and
histograms live in Redis and the web process reads them when `/metrics` is scraped. Gauges
that describe the database belong to the app that owns the rows (`stores.metrics`). A metrics
failure never fails the work being measured.
"""

from __future__ import annotations

import logging

import redis
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from ragmux.core.redis import shared_redis

logger = logging.getLogger("ragmux.core.metrics")

PREFIX = "ragmux:metrics"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
DESCRIPTIONS = {
    "ragmux_ingest_embed_tokens_total": "Embedding tokens spent by ingestion, reported by the upstream or estimated",
    "ragmux_ingest_stage_seconds": "Duration of ingestion stages per document (parse, chunk, embed, commit)",
    "ragmux_search_seconds": "Duration of store searches by mode and backend (query embedding excluded)",
}


def _labels_key(labels: dict[str, str]) -> str:
    return ",".join(f"{name}={labels[name]}" for name in sorted(labels))


def _parse_labels(key: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in key.split(",") if part)


class Batch:
    """Counts and observations sent to Redis together, in one round trip."""

    def __init__(self) -> None:
        self._commands: list[tuple[str, str, str, float]] = []

    def increment(self, name: str, amount: float = 1, **labels: str) -> None:
        self._commands.append(("hincrbyfloat", f"{PREFIX}:counter:{name}", _labels_key(labels), amount))

    def observe(self, name: str, value: float, **labels: str) -> None:
        key, target = _labels_key(labels), f"{PREFIX}:histogram:{name}"
        for bound in BUCKETS:
            if value <= bound:
                self._commands.append(("hincrby", target, f"{key}|{bound}", 1))
        self._commands.append(("hincrby", target, f"{key}|count", 1))
        self._commands.append(("hincrbyfloat", target, f"{key}|sum", value))

    def send(self) -> None:
        try:
            pipe = shared_redis().pipeline(transaction=False)
            for command, target, field, amount in self._commands:
                getattr(pipe, command)(target, field, amount)
            pipe.execute()
        except redis.RedisError as exc:
            logger.debug("metrics not recorded: %s", exc)


def increment(name: str, amount: float = 1, **labels: str) -> None:
    batch = Batch()
    batch.increment(name, amount, **labels)
    batch.send()


def observe(name: str, value: float, **labels: str) -> None:
    batch = Batch()
    batch.observe(name, value, **labels)
    batch.send()


class SharedMetricsCollector:
    """Exposes the Redis-held metrics to prometheus_client."""

    def describe(self):
        # Declaring nothing up front keeps registration from querying Redis and the database.
        return []

    def collect(self):
        try:
            yield from self._from_redis()
        except redis.RedisError as exc:
            logger.warning("shared metrics unavailable: %s", exc)

    def _from_redis(self):
        client = shared_redis()
        for raw in client.scan_iter(f"{PREFIX}:counter:*"):
            name = raw.decode().rsplit(":", 1)[1]
            values = {k.decode(): float(v) for k, v in client.hgetall(raw).items()}
            labels = sorted({n for key in values for n in _parse_labels(key)})
            family = CounterMetricFamily(name.removesuffix("_total"), DESCRIPTIONS.get(name, name), labels=labels)
            for key, value in values.items():
                parsed = _parse_labels(key)
                family.add_metric([parsed.get(n, "") for n in labels], value)
            yield family
        for raw in client.scan_iter(f"{PREFIX}:histogram:*"):
            name = raw.decode().rsplit(":", 1)[1]
            fields = {k.decode(): float(v) for k, v in client.hgetall(raw).items()}
            series = sorted({field.split("|", 1)[0] for field in fields})
            labels = sorted({n for key in series for n in _parse_labels(key)})
            family = HistogramMetricFamily(name, DESCRIPTIONS.get(name, name), labels=labels)
            for key in series:
                parsed = _parse_labels(key)
                buckets = [(str(b), fields.get(f"{key}|{b}", 0.0)) for b in BUCKETS]
                buckets.append(("+Inf", fields.get(f"{key}|count", 0.0)))
                family.add_metric([parsed.get(n, "") for n in labels], buckets, fields.get(f"{key}|sum", 0.0))
            yield family


def register_collector() -> None:
    from prometheus_client import REGISTRY

    REGISTRY.register(SharedMetricsCollector())
