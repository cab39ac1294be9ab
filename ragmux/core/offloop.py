"""Crossing between the event loop and blocking code: blocking work (the ORM, the local embedding
model, search) run from async code (:func:`off_loop`), and a coroutine run to its end from
synchronous code (:func:`on_thread_loop`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

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


_threads = threading.local()
# Where a coroutine goes when the calling thread's own loop is running (see on_thread_loop).
_beside_running_loop = ThreadPoolExecutor(max_workers=1, thread_name_prefix="on-thread-loop")


def on_thread_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine`` run to its end from synchronous code, on an event loop this thread keeps: the
    clients bound to a loop (the outbound HTTP pool, the cooldowns' Redis) are opened once per
    thread, not once per call. A thread whose own loop is running (synchronous code called from
    a loop, as a test driving Playwright's sync API does) cannot run a second one, so there the
    coroutine runs on a worker thread's loop and this thread waits for it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _thread_runner().run(coroutine)
    return _beside_running_loop.submit(lambda: _thread_runner().run(coroutine)).result()


def _thread_runner() -> asyncio.Runner:
    runner = getattr(_threads, "runner", None)
    if runner is None:
        runner = _threads.runner = asyncio.Runner()
    return runner
