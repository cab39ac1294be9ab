"""Async PostgreSQL connections for the statements an async view runs on every call.

Django's ORM is sync-only: from an async view each query is a hop to a worker thread, a
checkout from Django's pool with a health-check round trip, and SQL compiled anew. A statement
run on every `/v1` call (the key lookup) goes through here instead: a small pool of
``psycopg.AsyncConnection`` on the event loop, with the statement prepared once per connection.

The connections are checked when they fail, not on every checkout: a statement that fails
because its connection broke (a database restart) is run once more after the pool has checked
its idle connections, so a restart costs no request either way. A checkout gives up at once on a
database out of reach, and replaces the pool when it is back (``ragmux.core.postgresql``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from django.db import connections
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from ragmux.core.postgresql import WAIT_SLICE, AsyncObservedConnection, CheckoutWait, check_answering, outage

# Each statement here is a single indexed lookup; a few connections serve thousands a second.
POOL_SIZE = 4

# A pool's connections and tasks belong to the event loop that opened it.
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = weakref.WeakKeyDictionary()
# Replaced pools being closed (a task nothing else refers to may be collected before it ends).
_closing: set[asyncio.Task] = set()


def _connection_kwargs() -> dict[str, Any]:
    """Django's own connection parameters (so the test database too), minus its sync cursor and
    adapters: these connections load JSON, arrays and timestamps with psycopg's defaults."""
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    # Django turns prepared statements off unless its OPTIONS set a threshold (for connection
    # poolers that cannot keep them); without one, preparing is what this module is for.
    if "prepare_threshold" not in connections["default"].settings_dict["OPTIONS"]:
        params["prepare_threshold"] = 0
    params["autocommit"] = True
    return params


async def _pool() -> AsyncConnectionPool:
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = AsyncConnectionPool(
            kwargs=_connection_kwargs(),
            connection_class=AsyncObservedConnection,
            min_size=1,
            max_size=POOL_SIZE,
            open=False,
        )
        _pools[loop] = pool
        await pool.open()
    return pool


async def _reconnect() -> None:
    """Raises if the database is still out of reach; else replaces this loop's pool, which may
    be in a long backoff before its next attempt."""
    loop = asyncio.get_running_loop()
    stale = _pools.get(loop)
    await asyncio.to_thread(check_answering, _connection_kwargs())
    await (await AsyncObservedConnection.connect(**_connection_kwargs())).close()
    if stale is not None and _pools.get(loop) is stale:
        del _pools[loop]
        # In the background: its own attempts may still be hanging on a server that was stopped.
        closing = loop.create_task(stale.close())
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)


async def _checkout() -> tuple[AsyncConnectionPool, psycopg.AsyncConnection]:
    wait = CheckoutWait()
    while True:
        pool = await _pool()
        try:
            return pool, await pool.getconn(timeout=WAIT_SLICE)
        except (PoolTimeout, PoolClosed):  # an empty slice, or a pool replaced meanwhile
            if wait.should_reconnect(pool):
                await _reconnect()


async def fetch_one(sql: str, params: tuple) -> tuple | None:
    """The first row of ``sql``, or None."""
    return await _run(sql, params, psycopg.AsyncCursor.fetchone)


async def fetch_all(sql: str, params: tuple) -> list[tuple]:
    return await _run(sql, params, psycopg.AsyncCursor.fetchall)


async def execute(sql: str, params: tuple) -> None:
    await _run(sql, params, None)


async def _run(sql: str, params: tuple, read: Callable[[psycopg.AsyncCursor], Awaitable[Any]] | None) -> Any:
    for attempt in (1, 2):
        pool, connection = await _checkout()
        try:
            cursor = await connection.execute(sql, params)
            return await read(cursor) if read is not None else None
        except psycopg.OperationalError:
            # Run again only on a connection broken by a restart, never during an outage.
            if attempt == 2 or not connection.closed or outage.failure is not None:
                raise
        finally:
            await pool.putconn(connection)
        await pool.check()
    raise AssertionError("unreachable")


async def reachable() -> None:
    """Raises unless a new connection can be opened and answers a statement: the pool's open
    connections could hide a server that accepts no more."""
    async with await psycopg.AsyncConnection.connect(**_connection_kwargs()) as connection:
        await connection.execute("SELECT 1")


def open_pools() -> list[AsyncConnectionPool]:
    """The pools of this process's event loops (read by ragmux.core.pool_metrics' thread)."""
    return list(_pools.values())


async def close() -> None:
    """Closes this event loop's pool (at the web process's shutdown)."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()
