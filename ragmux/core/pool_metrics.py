"""The database pools of a web process, as metrics.

Only the web process pools its connections: Django's pool for the ORM (``orm``, set up in
ragmux/asgi.py) and the async pool of the key lookups (``async``, ``ragmux.core.asyncdb``, one
per event loop). A scrape may be answered by another process than the one whose pools it
describes (another web worker, or `ragmux serve` itself on METRICS_LISTEN), so each web process
samples its own pools every :data:`SAMPLE_SECONDS` in a thread into gauges summed over the host's
processes, and adds the pools' checkouts since the last sample to counters. psycopg_pool's
statistics are read with ``get_stats()``, never ``pop_stats()``: ``ragmux.core.postgresql``
reads their running totals too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import Counter, Gauge

from ragmux.core import metrics

SAMPLE_SECONDS = 5.0

POOL_CONNECTIONS = Gauge(
    "ragmux_db_pool_total_conns",
    "Connections the web processes' pools hold, by pool",
    ["pool"],
    multiprocess_mode="livesum",
)
POOL_IDLE = Gauge(
    "ragmux_db_pool_idle_conns",
    "Connections idle in the web processes' pools, by pool",
    ["pool"],
    multiprocess_mode="livesum",
)
POOL_ACQUIRED = Gauge(
    "ragmux_db_pool_acquired_conns",
    "Connections checked out of the web processes' pools, by pool",
    ["pool"],
    multiprocess_mode="livesum",
)
POOL_MAX = Gauge(
    "ragmux_db_pool_max_conns",
    "The most connections the web processes' pools may open, by pool",
    ["pool"],
    multiprocess_mode="livesum",
)
POOL_WAITING = Gauge(
    "ragmux_db_pool_waiting", "Checkouts waiting for a connection, by pool", ["pool"], multiprocess_mode="livesum"
)
POOL_ACQUIRES = Counter("ragmux_db_pool_acquires_total", "Connections checked out of a pool, by pool", ["pool"])
POOL_EMPTY_ACQUIRES = Counter(
    "ragmux_db_pool_empty_acquires_total", "Checkouts that found no idle connection and waited, by pool", ["pool"]
)

# psycopg_pool's running totals, and the counter each one moves.
_TOTALS = {"requests_num": POOL_ACQUIRES, "requests_queued": POOL_EMPTY_ACQUIRES}


class PoolSampler:
    """Turns pools' statistics into the gauges and counters above. A pool replaced after an
    outage starts its totals again; its counts are added from zero."""

    def __init__(self) -> None:
        # Per pool label: the totals last seen, by the pool they were read from.
        self._seen: dict[str, dict[int, dict[str, int]]] = {}

    def sample(self, name: str, pools: Iterable) -> None:
        size = idle = maximum = waiting = 0
        previous = self._seen.get(name, {})
        current: dict[int, dict[str, int]] = {}
        for pool in pools:
            stats = pool.get_stats()
            size += stats.get("pool_size", 0)
            idle += stats.get("pool_available", 0)
            maximum += stats.get("pool_max", 0)
            waiting += stats.get("requests_waiting", 0)
            totals = {key: stats.get(key, 0) for key in _TOTALS}
            before = previous.get(id(pool), dict.fromkeys(_TOTALS, 0))
            for key, counter in _TOTALS.items():
                if totals[key] > before[key]:
                    metrics.increment(counter, totals[key] - before[key], pool=name)
            current[id(pool)] = totals
        self._seen[name] = current
        metrics.put(POOL_CONNECTIONS, size, pool=name)
        metrics.put(POOL_IDLE, idle, pool=name)
        metrics.put(POOL_ACQUIRED, size - idle, pool=name)
        metrics.put(POOL_MAX, maximum, pool=name)
        metrics.put(POOL_WAITING, waiting, pool=name)


def _orm_pools() -> list:
    from django.db.backends.postgresql.base import DatabaseWrapper

    # Django's registry of pools, read rather than `connections[...].pool`, which would open one.
    pool = DatabaseWrapper._connection_pools.get("default")
    return [] if pool is None else [pool]


def _sample_forever(stop: threading.Event) -> None:
    from ragmux.core import asyncdb

    sampler = PoolSampler()
    while not stop.wait(SAMPLE_SECONDS):
        try:
            sampler.sample("orm", _orm_pools())
            sampler.sample("async", asyncdb.open_pools())
        except Exception as exc:  # noqa: BLE001 - a metrics failure never fails the process
            metrics.note_failure(exc)


def start_sampling() -> threading.Event:
    """Samples this process's pools until the returned event is set."""
    stop = threading.Event()
    threading.Thread(target=_sample_forever, args=(stop,), name="pool-metrics", daemon=True).start()
    return stop
