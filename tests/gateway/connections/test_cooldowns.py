"""The cooldown store: a process's own memory, and Redis shared by every process."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway.connections import cooldowns
from gateway.connections.cooldowns import LocalCooldowns, Rules
from tests.helpers import forget_cooldowns

RULES = Rules(failures=3, window=60, cooldown=30)


@pytest.fixture(autouse=True)
def _fresh_cooldowns():
    yield
    forget_cooldowns()


def test_a_target_cools_after_the_threshold_within_the_window():
    store = LocalCooldowns()
    assert store.failed("t", now=0, rules=RULES, retry_after=None) is None
    assert store.failed("t", now=10, rules=RULES, retry_after=None) is None
    assert store.cooling(["t"], now=10) == {}
    assert store.failed("t", now=20, rules=RULES, retry_after=None) == 50
    assert store.cooling(["t", "other"], now=49.9) == {"t": 50}
    assert store.cooling(["t"], now=50) == {}


def test_failures_spread_wider_than_the_window_do_not_cool():
    store = LocalCooldowns()
    for now in (0, 30, 61, 90, 122):
        assert store.failed("t", now=now, rules=RULES, retry_after=None) is None
    assert store.cooling(["t"], now=122) == {}


def test_a_longer_retry_after_cools_at_once_for_as_long():
    store = LocalCooldowns()
    assert store.failed("t", now=0, rules=RULES, retry_after=120) == 120
    assert store.cooling(["t"], now=100) == {"t": 120}


def test_a_shorter_cooldown_never_cuts_a_longer_one():
    store = LocalCooldowns()
    store.failed("t", now=0, rules=RULES, retry_after=120)
    for now in (1, 2, 3):
        store.failed("t", now=now, rules=RULES, retry_after=None)
    assert store.cooling(["t"], now=100) == {"t": 120}


def run(coroutine):
    """The coroutine's result, on a loop of its own in a thread of its own: the browser tests'
    Playwright leaves an event loop running in the suite's main thread."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


async def fail_and_read(key: str, times: int) -> tuple[list[float | None], dict[str, float]]:
    ends = [await cooldowns.failed(key, retry_after=None) for _ in range(times)]
    return ends, await cooldowns.cooling([key, "other"])


def test_redis_holds_the_cooldown_for_every_process(settings):
    settings.ROUTE_COOLDOWN_FAILURES = 2
    ends, cooling = run(fail_and_read("shared:target", 2))
    assert ends[0] is None and ends[1] is not None
    cooldowns.local.clear()  # as another process, which saw none of the failures, reads it
    assert run(cooldowns.cooling(["shared:target"])) == {"shared:target": ends[1]}


def test_a_redis_outage_keeps_the_cooldowns_in_the_process(settings, redis_unreachable):
    settings.ROUTE_COOLDOWN_FAILURES = 2
    ends, cooling = run(fail_and_read("outage:target", 2))
    assert ends[1] is not None and cooling == {"outage:target": ends[1]}
