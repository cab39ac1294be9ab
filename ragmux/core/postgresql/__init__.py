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

A server that stops answering without closing anything (its processes stopped, a frozen VM or
network) leaves a statement waiting for ever: TCP keeps its connections, and the server cannot
apply its own ``statement_timeout``. So a statement not answered within :data:`ANSWER_CHECK_AFTER`
has its server asked whether it answers at all (:func:`server_answers`, a one-byte exchange on a
connection of its own, within :data:`PROBE_TIMEOUT`): one still answering is waited for (a slow
statement is its ``statement_timeout``'s to end), one that does not ends the statement with an
outage, its connection closed. Every query path of the web process (Django's pool, the async
pool) goes through these connections, so a frozen server costs a request about a second.

The pool's own failures count because a process has several pools, and the first to reach the
database again ends the outage for all of them: after a 10 s outage `/v1`'s pool was back while
the dashboard's, whose attempts had failed at ~0, 1, 3 and 7 s, made its next one at ~15 s, and
each dashboard request waited for it, up to 5 s. A pool that failed and then reconnected on its
own is replaced too, once, by the first checkout that finds it empty.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import psycopg
from psycopg.errors import _WaitTimeout  # what psycopg's own bounded wait raises
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


# How long a statement waits for its answer before its server is asked whether it answers at all,
# and how long that question may take.
ANSWER_CHECK_AFTER = 0.5
PROBE_TIMEOUT = 0.5
# The frontend's SSLRequest: the first thing a server reads from a new connection, answered with
# one byte ("S" or "N") before any authentication.
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)
# psycopg's own interval between checks of a wait (for Ctrl-C).
_WAIT_INTERVAL = 0.1


def server_answers(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the PostgreSQL server at ``host`` (a name, an address, or a Unix socket's folder)
    answers a new connection's first message within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    try:
        if host.startswith("/"):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(timeout)
            probe.connect(f"{host}/.s.PGSQL.{port}")
        else:
            probe = socket.create_connection((host, port), timeout=timeout)
        with probe:
            probe.settimeout(max(0.01, deadline - time.monotonic()))
            probe.sendall(_SSL_REQUEST)
            return bool(probe.recv(1))
    except OSError:
        return False


def _unanswered(connection: psycopg.Connection | psycopg.AsyncConnection) -> psycopg.OperationalError:
    """The outage a statement met on a server that answers nothing; its connection is closed."""
    connection.pgconn.finish()
    failure = psycopg.OperationalError(
        f"the database server did not answer within {ANSWER_CHECK_AFTER:g}s and does not answer a new "
        f"connection within {PROBE_TIMEOUT:g}s either"
    )
    outage.observe(failure)
    return failure


def check_answering(params: dict) -> None:
    """Raises the outage unless the server of the connection ``params`` name answers a new
    connection's first message: a checkout's own connection attempt during an outage would wait
    the whole connect timeout on a server that accepts connections and serves none."""
    host, port = params.get("host") or "/var/run/postgresql", int(params.get("port") or 5432)
    if not server_answers(host, port):
        failure = psycopg.OperationalError(f"the database server does not answer within {PROBE_TIMEOUT:g}s")
        outage.observe(failure)
        raise failure


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

    def wait(self, gen, interval: float = _WAIT_INTERVAL, timeout: float | None = None):
        if timeout is not None:
            return super().wait(gen, interval, timeout)
        while True:
            try:
                return super().wait(gen, interval, ANSWER_CHECK_AFTER)
            except _WaitTimeout:
                if not server_answers(self.info.host, self.info.port):
                    raise _unanswered(self) from None


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

    async def wait(self, gen, interval: float = _WAIT_INTERVAL, timeout: float | None = None):
        if timeout is not None:
            return await super().wait(gen, interval, timeout)
        while True:
            try:
                return await super().wait(gen, interval, ANSWER_CHECK_AFTER)
            except _WaitTimeout:
                if not await asyncio.to_thread(server_answers, self.info.host, self.info.port):
                    raise _unanswered(self) from None


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
