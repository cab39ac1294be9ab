"""Signing in with a username and password, behind the brute-force limiter.

Failed attempts are kept in Redis so every web process counts the same ones. Three sliding
windows are checked before a password is looked at:

- per (username, address) pair over LOGIN_LOCKOUT_MINUTES: the lockout. Keyed on the pair so
  a stranger guessing from elsewhere cannot lock the real user out;
- per username over one minute (LOGIN_USER_LIMIT_PER_MIN);
- per client address over one minute (LOGIN_RATE_LIMIT_PER_MIN).

Only failures count, and a success does not clear earlier ones: the windows simply expire.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import redis
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.models import User

from ragmux.core.errors import RateLimited, Unauthenticated
from ragmux.core.redis import shared_redis

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


def client_address(request) -> str:
    """The caller's address; a proxy's headers are believed only when the operator says one is
    in front (TRUST_PROXY_HEADERS), since anyone can send them."""
    if settings.TRUST_PROXY_HEADERS:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        # The last entry is the one our proxy appended; earlier ones are the client's to invent.
        if forwarded:
            return forwarded[-1]
        real_ip = request.META.get("HTTP_X_REAL_IP", "").strip()
        if real_ip:
            return real_ip
    return request.META.get("REMOTE_ADDR", "")


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


@dataclass(frozen=True)
class _Attempt:
    member: str
    keys: tuple[str, ...]
    attempts_remaining: int | None


def _begin_attempt(*, username: str, address: str) -> _Attempt:
    """Counts this attempt as a failure and reads the counts in one atomic step, before the
    password is checked: checking first and recording afterwards would let many guesses sent in
    parallel all pass the check. A refused or successful attempt is uncounted again."""
    client = shared_redis()
    windows = _windows(username, address)
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
    # Per window: the oldest failure inside it, and how many there are counting this attempt.
    counted = {which: (replies[5 * n + 3], replies[5 * n + 4]) for n, which in enumerate(windows)}
    attempt = _Attempt(
        member=member,
        keys=tuple(key for key, _, _ in windows.values()),
        attempts_remaining=max(0, windows["user"][1] - counted["user"][1]) if "user" in windows else None,
    )
    refusal = None
    if "pair" in counted and counted["pair"][1] > windows["pair"][1]:
        oldest = counted["pair"][0][0][1]
        refusal = SignInThrottled(locked=True, retry_after=max(1, math.ceil(oldest + windows["pair"][2] - now)))
    elif any(which in counted and counted[which][1] > windows[which][1] for which in ("user", "addr")):
        refusal = SignInThrottled(locked=False, retry_after=max(1, math.ceil(settings.LOGIN_RATE_WINDOW)))
    if refusal is not None:
        _uncount(attempt)
        raise refusal
    return attempt


def _uncount(attempt: _Attempt) -> None:
    pipe = shared_redis().pipeline(transaction=False)
    for key in attempt.keys:
        pipe.zrem(key, attempt.member)
    pipe.execute()


def sign_in(*, request, username: str, password: str) -> User:
    """The user these credentials belong to, or InvalidCredentials / SignInThrottled."""
    attempt = _begin_attempt(username=username, address=client_address(request))
    user = authenticate(request, username=username, password=password)
    if user is None:
        raise InvalidCredentials(attempts_remaining=attempt.attempts_remaining)
    _uncount(attempt)
    return user
