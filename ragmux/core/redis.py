"""The one Redis client of a process, and what the process knows of Redis's health.

Redis is an accelerator, never a single point of failure for a write: each use has a fallback
for when it is down (sign-in throttling counts in the process, route cooldowns are kept in the
process, ingestion wake-ups wait for the scheduler's sweep). After a failure the process leaves
Redis alone for OUTAGE_RETRY_SECONDS, so a hung server costs one request its timeout rather than
every request; the outage is logged once when it starts and once when it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import lru_cache

import redis
from django.conf import settings

logger = logging.getLogger("ragmux.redis")

OUTAGE_RETRY_SECONDS = 5.0


@lru_cache(maxsize=1)
def shared_redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


class RedisOutage:
    """Whether this process currently sees Redis as down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._retry_at = 0.0

    def skip(self) -> bool:
        """True while Redis is to be left alone: it failed less than OUTAGE_RETRY_SECONDS ago."""
        return time.monotonic() < self._retry_at

    def failed(self, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            started = self._since is None
            if started:
                self._since = now
            self._retry_at = now + OUTAGE_RETRY_SECONDS
        if started:
            logger.warning(
                "Redis is unreachable (%s): until it is back, sign-in throttling counts in each process "
                "and route cooldowns are kept in each process, and ingestion waits for the scheduler's sweep",
                exc,
            )

    def succeeded(self) -> None:
        if self._since is None:  # the common case, without taking the lock
            return
        with self._lock:
            since, self._since, self._retry_at = self._since, None, 0.0
        if since is not None:
            logger.warning("Redis is reachable again after %.1f s", time.monotonic() - since)


redis_outage = RedisOutage()
