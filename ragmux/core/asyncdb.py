"""Async PostgreSQL connections for the statements an async view runs on every call.

Django's ORM is sync-only: from an async view each query is a hop to a worker thread, a
checkout from Django's pool with a health-check round trip, and SQL compiled anew. A statement
run on every `/v1` call (the key lookup) goes through here instead: a small pool of
``psycopg.AsyncConnection`` on the event loop, with the statement prepared once per connection.

The connections are checked when they fail, not on every checkout: a statement that fails
because its connection broke (a database restart) is run once more after the pool has checked
its idle connections, so a restart costs no request either way.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from django.db import connections
from psycopg_pool import AsyncConnectionPool

# Each statement here is a single indexed lookup; a few connections serve thousands a second.
POOL_SIZE = 4

# A pool's connections and tasks belong to the event loop that opened it.
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = weakref.WeakKeyDictionary()


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
        pool = AsyncConnectionPool(kwargs=_connection_kwargs(), min_size=1, max_size=POOL_SIZE, open=False)
        _pools[loop] = pool
        await pool.open()
    return pool


async def fetch_one(sql: str, params: tuple) -> tuple | None:
    """The first row of ``sql``, or None."""
    return await _run(sql, params, psycopg.AsyncCursor.fetchone)


async def fetch_all(sql: str, params: tuple) -> list[tuple]:
    return await _run(sql, params, psycopg.AsyncCursor.fetchall)


async def execute(sql: str, params: tuple) -> None:
    await _run(sql, params, None)


async def _run(sql: str, params: tuple, read: Callable[[psycopg.AsyncCursor], Awaitable[Any]] | None) -> Any:
    pool = await _pool()
    for attempt in (1, 2):
        async with pool.connection() as connection:
            try:
                cursor = await connection.execute(sql, params)
                return await read(cursor) if read is not None else None
            except psycopg.OperationalError:
                if attempt == 2 or not connection.closed:
                    raise
        await pool.check()
    raise AssertionError("unreachable")


async def close() -> None:
    """Closes this event loop's pool (at the web process's shutdown)."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()
