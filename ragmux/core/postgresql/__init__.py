"""Django's PostgreSQL backend, made to give up at once on a database out of reach.

psycopg_pool never tells a waiting client that the pool's connection attempts fail: it retries
them in the background with a growing backoff while the client waits the pool's whole timeout
(30 s), then raises. With PostgreSQL stopped, every request hung that long and then failed.

Here every connection either pool of a process makes (Django's in the web server, and
``ragmux.core.asyncdb``'s on each event loop) goes through :class:`ObservedConnection`, which
keeps the latest failure in :data:`outage` until a connection succeeds again. A checkout waits
for its pool in short slices (:class:`CheckoutWait`), so a connection the pool has is still
used (a server whose listener hangs keeps serving the connections it has), and a pool that is
merely busy is waited for up to :data:`POOL_WAIT` as before. A checkout that sees one of the
pool's attempts fail while it waits gives up with that failure. One that started while an
outage was already known, or whose pool's own attempts have failed, tries, after a slice without
a connection, one connection of its own (within ``DATABASE_CONNECT_TIMEOUT``): that raises as
soon as the server refuses it, or, once the server is back, the pool is replaced, as its own
next attempt may still be seconds of backoff away (the stale pool is closed in the background:
its attempts may still be hanging).

The pool's own failures count because a process has several pools, and the first to reach the
database again ends the outage for all of them: after a 10 s outage `/v1`'s pool was back while
the dashboard's, whose attempts had failed at ~0, 1, 3 and 7 s, made its next one at ~15 s, and
each dashboard request waited for it, up to 5 s. A pool that failed and then reconnected on its
own is replaced too, once, by the first checkout that finds it empty.
"""

from __future__ import annotations

import time

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

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
        self.known_failure = outage.failure

    def should_reconnect(self, pool: ConnectionPool | AsyncConnectionPool) -> bool:
        """After a slice without a connection from ``pool``: True when an outage was known before
        this checkout or ``pool``'s own connection attempts have failed (it then tries a connection
        of its own), False to wait another slice. Raises the failure of a connection attempt made
        meanwhile, and PoolTimeout once :data:`POOL_WAIT` is spent."""
        failure = outage.failure
        if failure is not None and failure is not self.known_failure:
            # A new exception: one object raised in several threads would gather their tracebacks.
            raise psycopg.OperationalError(f"the database is out of reach: {failure}") from failure
        if failure is not None or pool.get_stats().get("connections_errors", 0) > 0:
            return True
        if time.monotonic() >= self.deadline:
            raise PoolTimeout(f"couldn't get a connection after {POOL_WAIT:g} sec")
        return False


# Options for Django's pool (ragmux.asgi): its own timeout is one slice of a checkout's wait.
POOL_OPTIONS = {"connection_class": ObservedConnection, "timeout": WAIT_SLICE}
