"""Django's PostgreSQL backend, made to give up at once on a database out of reach.

psycopg_pool never tells a waiting client that the pool's connection attempts fail: it retries
them in the background with a growing backoff while the client waits the pool's whole timeout
(30 s), then raises. With PostgreSQL stopped, every request hung that long and then failed.

Here every connection either pool of a process makes (Django's in the web server, and
``ragmux.core.asyncdb``'s on each event loop) goes through :class:`ObservedConnection`, which
keeps the latest failure in :data:`outage` until a connection succeeds again. A checkout waits
for its pool in short slices (:class:`CheckoutWait`): a pool that is merely busy is waited for
up to :data:`POOL_WAIT` as before, one whose attempts failed meanwhile is given up on with that
failure. While an outage is known, a checkout first tries one connection of its own (within
``DATABASE_CONNECT_TIMEOUT``): it fails as fast as the server refuses, or, once the server is
back, replaces the pool, whose own next attempt may still be seconds of backoff away.
"""

from __future__ import annotations

import time

import psycopg
from psycopg_pool import PoolTimeout

# psycopg_pool's own default: how long a checkout waits for a connection of a busy pool.
POOL_WAIT = 30.0
# How often a waiting checkout looks whether its pool's connection attempts are failing.
WAIT_SLICE = 0.2


class Outage:
    """The latest failed connection attempt of this process, until one succeeds again."""

    def __init__(self) -> None:
        self.failure: psycopg.OperationalError | None = None

    def observe(self, failure: psycopg.OperationalError | None) -> None:
        self.failure = failure

    def error(self) -> psycopg.OperationalError:
        """A fresh exception saying the known failure (one object raised in several threads
        would collect all their tracebacks)."""
        return psycopg.OperationalError(f"the database is out of reach: {self.failure}")


outage = Outage()


class ObservedConnection(psycopg.Connection):
    @classmethod
    def connect(cls, conninfo: str = "", **kwargs):
        try:
            connection = super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            outage.observe(exc)
            raise
        outage.observe(None)
        return connection


class AsyncObservedConnection(psycopg.AsyncConnection):
    @classmethod
    async def connect(cls, conninfo: str = "", **kwargs):
        try:
            connection = await super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            outage.observe(exc)
            raise
        outage.observe(None)
        return connection


class CheckoutWait:
    """One checkout's wait for its pool, a :data:`WAIT_SLICE` at a time."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + POOL_WAIT

    def after_empty_slice(self, exc: Exception) -> None:
        """Raises once the pool's connection attempts fail or :data:`POOL_WAIT` is spent; returns
        when the checkout should wait another slice."""
        if outage.failure is not None:
            raise outage.error() from exc
        if time.monotonic() >= self.deadline:
            raise PoolTimeout(f"couldn't get a connection after {POOL_WAIT:g} sec") from None


# Options for Django's pool (ragmux.asgi): its own timeout is one slice of a checkout's wait.
POOL_OPTIONS = {"connection_class": ObservedConnection, "timeout": WAIT_SLICE}
