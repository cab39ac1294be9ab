"""Signing in with a username and password, behind the brute-force limiter.

Failed attempts are kept in Redis so every web process counts the same ones; while Redis is
down each process counts them itself (`LocalWindows`), so signing in never fails with Redis.
Three sliding windows are checked before a password is looked at:

- per (username, address) pair over LOGIN_LOCKOUT_MINUTES: the lockout. Keyed on the pair so
  a stranger guessing from elsewhere cannot lock the real user out;
- per username over one minute (LOGIN_USER_LIMIT_PER_MIN);
- per client address over one minute (LOGIN_RATE_LIMIT_PER_MIN).

Only failures count, and a success does not clear earlier ones: the windows simply expire.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import dataclass

import redis
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.models import User

from ragmux.core.errors import RateLimited, Unauthenticated
from ragmux.core.proxies import client_address
from ragmux.core.redis import redis_outage, shared_redis

PREFIX = "ragmux:signin"


class InvalidCredentials(Unauthenticated):
    code = "invalid_credentials"

    def __init__(self, *, attempts_remaining: int | None):
        extra = {} if attempts_remaining is None else {"attempts_remaining": attempts_remaining}
        # One message for unknown, wrong-password and deactivated users: no user enumeration.
        super().__init__("invalid username or password", **extra)


class SignInThrottled(RateLimited):
    code = "rate_limited"

    def __init__(self, *, locked: bool, retry_after: int):
        super().__init__("too many login attempts, try again later", locked=locked)
        self.locked = locked
        self.retry_after = retry_after


def _windows(username: str, address: str) -> dict[str, tuple[str, int, float]]:
    """Each enabled limit: its Redis key, how many failures it allows, and its window in seconds."""
    # Usernames match case-insensitively, so their counters must too.
    name = username.lower()
    minute = settings.LOGIN_RATE_WINDOW
    limits = {
        "pair": (
            f"{PREFIX}:pair:{address}|{name}",
            settings.LOGIN_LOCKOUT_FAILURES,
            settings.LOGIN_LOCKOUT_MINUTES * 60,
        ),
        "user": (f"{PREFIX}:user:{name}", settings.LOGIN_USER_LIMIT_PER_MIN, minute),
        "addr": (f"{PREFIX}:addr:{address}", settings.LOGIN_RATE_LIMIT_PER_MIN, minute),
    }
    return {which: limit for which, limit in limits.items() if limit[1] and limit[2]}


def _now(client: redis.Redis) -> float:
    # The Redis server's clock, so web processes on machines with drifting clocks share windows.
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


class LocalWindows:
    """The failures of the sliding windows kept in this process, for while Redis is down: the
    limits still hold, but each web process counts only the attempts it saw itself."""

    # Windows whose last failure has expired are dropped once there are more than this, and
    # whenever their number doubled since: a guesser spraying names cannot fill the memory.
    PRUNE_ABOVE = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[str, dict[str, float]] = {}
        self._expires: dict[str, float] = {}
        self._prune_above = self.PRUNE_ABOVE

    def add(self, key: str, member: str, now: float, window: float) -> tuple[float, int]:
        """Adds a failure and forgets those older than the window, as the Redis pipeline does;
        returns when the oldest left happened and how many there are."""
        with self._lock:
            failures = self._failures.setdefault(key, {})
            failures[member] = now
            for expired in [m for m, at in failures.items() if at <= now - window]:
                del failures[expired]
            self._expires[key] = now + window  # as the pipeline's EXPIRE
            counted = min(failures.values()), len(failures)
            if len(self._failures) > self._prune_above:
                for gone in [k for k, at in self._expires.items() if at <= now]:
                    del self._expires[gone], self._failures[gone]
                self._prune_above = max(self.PRUNE_ABOVE, 2 * len(self._failures))
            return counted

    def remove(self, keys: tuple[str, ...], member: str) -> None:
        with self._lock:
            for key in keys:
                failures = self._failures.get(key, {})
                failures.pop(member, None)
                if not failures:
                    self._failures.pop(key, None)
                    self._expires.pop(key, None)

    def __len__(self) -> int:
        """How many windows hold failures (expired ones not yet dropped included)."""
        return len(self._failures)

    def clear(self) -> None:
        if self._failures:  # the common case, without taking the lock
            with self._lock:
                self._failures.clear()
                self._expires.clear()


_in_process = LocalWindows()


@dataclass(frozen=True)
class _Attempt:
    member: str
    keys: tuple[str, ...]
    attempts_remaining: int | None
    counted_in_redis: bool


Counts = dict[str, tuple[float, int]]  # per window: its oldest failure, and how many there are


def _count_in_redis(windows: dict[str, tuple[str, int, float]]) -> tuple[float, str, Counts]:
    client = shared_redis()
    now = _now(client)
    member = f"{now}:{secrets.token_hex(8)}"
    pipe = client.pipeline(transaction=True)
    for key, _, window in windows.values():
        pipe.zadd(key, {member: now})
        pipe.zremrangebyscore(key, "-inf", now - window)
        pipe.expire(key, max(1, math.ceil(window)))
        pipe.zrange(key, 0, 0, withscores=True)
        pipe.zcard(key)
    replies = pipe.execute()
    return now, member, {which: (replies[5 * n + 3][0][1], replies[5 * n + 4]) for n, which in enumerate(windows)}


def _count_in_process(windows: dict[str, tuple[str, int, float]]) -> tuple[float, str, Counts]:
    now = time.time()
    member = f"{now}:{secrets.token_hex(8)}"
    return (
        now,
        member,
        {which: _in_process.add(key, member, now, window) for which, (key, _, window) in windows.items()},
    )


def _count(windows: dict[str, tuple[str, int, float]]) -> tuple[float, str, Counts, bool]:
    """Counts the attempt in Redis, or in this process while Redis is down (never a 500)."""
    if not redis_outage.skip():
        try:
            counted = _count_in_redis(windows)
        except redis.RedisError as exc:
            redis_outage.failed(exc)
        else:
            redis_outage.succeeded()
            _in_process.clear()  # Redis counts again; what this process counted alone is dropped
            return (*counted, True)
    return (*_count_in_process(windows), False)


def _begin_attempt(*, username: str, address: str) -> _Attempt:
    """Counts this attempt as a failure and reads the counts in one atomic step, before the
    password is checked: checking first and recording afterwards would let many guesses sent in
    parallel all pass the check. A refused or successful attempt is uncounted again."""
    windows = _windows(username, address)
    now, member, counted, in_redis = _count(windows)
    attempt = _Attempt(
        member=member,
        keys=tuple(key for key, _, _ in windows.values()),
        attempts_remaining=max(0, windows["user"][1] - counted["user"][1]) if "user" in windows else None,
        counted_in_redis=in_redis,
    )
    refusal = None
    if "pair" in counted and counted["pair"][1] > windows["pair"][1]:
        oldest = counted["pair"][0]
        refusal = SignInThrottled(locked=True, retry_after=max(1, math.ceil(oldest + windows["pair"][2] - now)))
    elif any(which in counted and counted[which][1] > windows[which][1] for which in ("user", "addr")):
        refusal = SignInThrottled(locked=False, retry_after=max(1, math.ceil(settings.LOGIN_RATE_WINDOW)))
    if refusal is not None:
        _uncount(attempt)
        raise refusal
    return attempt


def _uncount(attempt: _Attempt) -> None:
    if not attempt.counted_in_redis:
        _in_process.remove(attempt.keys, attempt.member)
        return
    try:
        pipe = shared_redis().pipeline(transaction=False)
        for key in attempt.keys:
            pipe.zrem(key, attempt.member)
        pipe.execute()
    except redis.RedisError as exc:
        # Redis went away since the attempt was counted: it stays counted there, one failure
        # too many, which the window expires; the caller is answered all the same.
        redis_outage.failed(exc)


def sign_in(*, request, username: str, password: str) -> User:
    """The user these credentials belong to, or InvalidCredentials / SignInThrottled."""
    attempt = _begin_attempt(username=username, address=client_address(request))
    user = authenticate(request, username=username, password=password)
    if user is None:
        raise InvalidCredentials(attempts_remaining=attempt.attempts_remaining)
    _uncount(attempt)
    return user
