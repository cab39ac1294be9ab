"""Crossing between the event loop and blocking code."""

from __future__ import annotations

import asyncio
import threading

from ragmux.core.offloop import on_thread_loop


async def _thread_name() -> str:
    await asyncio.sleep(0)
    return threading.current_thread().name


def test_a_coroutine_runs_on_the_calling_threads_own_loop_kept_between_calls():
    loops = [on_thread_loop(_running_loop()) for _ in range(2)]

    assert on_thread_loop(_thread_name()) == threading.current_thread().name
    assert loops[0] is loops[1]


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_synchronous_code_called_from_a_running_loop_still_runs_its_coroutine():
    async def caller() -> str:
        # Synchronous code on this loop's thread: the loop cannot run a second one here.
        return on_thread_loop(_thread_name())

    assert asyncio.run(caller()).startswith("on-thread-loop")
