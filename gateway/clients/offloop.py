"""Blocking work (the ORM, the local embedding model, search) run from async views."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections

T = TypeVar("T")


def _in_worker_thread(function: Callable[..., T], *args, **kwargs) -> T:
    close_old_connections()
    try:
        return function(*args, **kwargs)
    finally:
        # Worker threads outlive requests; a connection left open here would outlive the
        # request that opened it (and any database restart).
        connections.close_all()


async def off_loop(function: Callable[..., T], *args, **kwargs) -> T:
    """Runs ``function`` in a worker thread so the event loop keeps serving other streams.

    Not thread-sensitive: calls of concurrent requests run side by side instead of queueing
    behind one shared thread.
    """
    return await sync_to_async(_in_worker_thread, thread_sensitive=False)(function, *args, **kwargs)
