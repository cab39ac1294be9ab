"""Which route targets are cooling down, shared by every web process through Redis.

A target (a connection and the model it is asked for, so one that fails cools in every route
that has it) that fails over ROUTE_COOLDOWN_FAILURES times within ROUTE_COOLDOWN_WINDOW of its
first counted failure is skipped for ROUTE_COOLDOWN, or for as long as its 429's
`Retry-After` asks when that is longer (such an answer cools it at once:
`routing.cools_at_once`). In Redis a target has two keys: its failure count, which expires
with its window, and the wall-clock time its cooldown ends, which expires then. A failure is one
script (count, and cool when the count reaches the threshold); a routed call reads its targets'
ends with one MGET.

Redis is an accelerator: every process also keeps the same state in its own memory, and while
Redis is down (`ragmux.core.redis.redis_outage`) it reads that instead, so the cooldowns
degrade to per-process ones and no call fails for it. The clock is the wall clock, as the
processes share it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio
from django.conf import settings

from gateway.connections import routing
from ragmux.core.redis import redis_outage, shared_redis

logger = logging.getLogger("ragmux.gateway.cooldowns")

PREFIX = "ragmux:route-cooldown"
# On the path of every routed call: a hung Redis must cost that call little, once (after that
# the process leaves Redis alone for a while, see redis_outage).
REDIS_TIMEOUT_SECONDS = 0.5

# KEYS: the failure count, the cooldown's end. ARGV: the threshold, the window (ms), the end
# the cooldown would have (epoch seconds), its length (ms), "1" to cool at once.
# Returns the end now in force when the target is cooling, else nil.
_FAILED = """
local failures = redis.call('INCR', KEYS[1])
if failures == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if failures < tonumber(ARGV[1]) and ARGV[5] ~= '1' then return nil end
redis.call('DEL', KEYS[1])
local current = redis.call('GET', KEYS[2])
if current and tonumber(current) >= tonumber(ARGV[3]) then return current end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return ARGV[3]
"""


def target_key(connection_id: int, model: str) -> str:
    return f"{connection_id}:{model}"


@dataclass(frozen=True)
class Rules:
    """The settings a failure is judged by."""

    failures: int
    window: float
    cooldown: float

    @classmethod
    def from_settings(cls) -> Rules:
        return cls(settings.ROUTE_COOLDOWN_FAILURES, settings.ROUTE_COOLDOWN_WINDOW, settings.ROUTE_COOLDOWN)


class LocalCooldowns:
    """The cooldowns as this process alone sees them: what Redis holds, kept in memory."""

    def __init__(self) -> None:
        # target -> (failures counted, when its window ends)
        self._failures: dict[str, tuple[int, float]] = {}
        self._until: dict[str, float] = {}

    def cooling(self, keys: Sequence[str], *, now: float) -> dict[str, float]:
        return {key: until for key in keys if (until := self._until.get(key, 0.0)) > now}

    def failed(self, key: str, *, now: float, rules: Rules, retry_after: int | None) -> float | None:
        """Counts a failure; the end of the target's cooldown when it is now cooling, else None."""
        count, window_end = self._failures.get(key, (0, 0.0))
        if window_end <= now:
            count, window_end = 0, now + rules.window
        count += 1
        at_once = routing.cools_at_once(cooldown=rules.cooldown, retry_after=retry_after)
        if count < rules.failures and not at_once:
            self._failures[key] = (count, window_end)
            return None
        self._failures.pop(key, None)
        until = now + routing.cooldown_seconds(cooldown=rules.cooldown, retry_after=retry_after)
        self._until[key] = max(until, self._until.get(key, 0.0))
        return self._until[key]

    def clear(self) -> None:
        self._failures.clear()
        self._until.clear()


local = LocalCooldowns()

# An asyncio client belongs to the event loop it connects on; one per loop and Redis URL.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, redis.asyncio.Redis]] = (
    weakref.WeakKeyDictionary()
)


def _client() -> redis.asyncio.Redis:
    by_url = _clients.setdefault(asyncio.get_running_loop(), {})
    client = by_url.get(settings.REDIS_URL)
    if client is None:
        client = redis.asyncio.Redis.from_url(
            settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
        )
        by_url[settings.REDIS_URL] = client
    return client


def _redis_key(kind: str, key: str) -> str:
    return f"{PREFIX}:{kind}:{key}"


def _unexpired(keys: Sequence[str], ends: Sequence[bytes | None], now: float) -> dict[str, float]:
    return {key: until for key, end in zip(keys, ends, strict=True) if end and (until := float(end)) > now}


async def cooling(keys: Sequence[str]) -> dict[str, float]:
    """The targets among ``keys`` that are cooling down, with when each cooldown ends."""
    now = time.time()
    if not keys:
        return {}
    if not redis_outage.skip():
        try:
            ends = await _client().mget([_redis_key("until", key) for key in keys])
        except (redis.RedisError, OSError) as exc:
            redis_outage.failed(exc)
        else:
            redis_outage.succeeded()
            return _unexpired(keys, ends, now)
    return local.cooling(keys, now=now)


def cooling_now(keys: Sequence[str]) -> dict[str, float]:
    """:func:`cooling`, for a thread (the `/metrics` scrape), by the process's blocking client."""
    now = time.time()
    if keys and not redis_outage.skip():
        try:
            ends = shared_redis().mget([_redis_key("until", key) for key in keys])
        except (redis.RedisError, OSError) as exc:
            redis_outage.failed(exc)
        else:
            redis_outage.succeeded()
            return _unexpired(keys, ends, now)
    return local.cooling(keys, now=now)


async def failed(key: str, *, retry_after: int | None) -> float | None:
    """Counts a target's failure, in this process and in Redis; the end of its cooldown when the
    failure made it (or it already was) cooling, else None."""
    now, rules = time.time(), Rules.from_settings()
    until = local.failed(key, now=now, rules=rules, retry_after=retry_after)
    if redis_outage.skip():
        return until
    at_once = routing.cools_at_once(cooldown=rules.cooldown, retry_after=retry_after)
    seconds = routing.cooldown_seconds(cooldown=rules.cooldown, retry_after=retry_after)
    try:
        shared = await _client().eval(
            _FAILED,
            2,
            _redis_key("failures", key),
            _redis_key("until", key),
            rules.failures,
            int(rules.window * 1000),
            repr(now + seconds),
            int(seconds * 1000),
            "1" if at_once else "0",
        )
    except (redis.RedisError, OSError) as exc:
        redis_outage.failed(exc)
        return until
    redis_outage.succeeded()
    return None if shared is None else float(shared)
