"""Signing in with a username and password, behind the brute-force limiter.

Failed attempts are kept in Redis so every web process counts the same ones. Three sliding
windows are checked before a password is looked at:

- per (username, address) pair over LOGIN_LOCKOUT_MINUTES: the lockout. Keyed on the pair so
  a stranger guessing from elsewhere cannot lock the real user out;
- per username over one minute (LOGIN_USER_LIMIT_PER_MIN);
- per client address over one minute (LOGIN_RATE_LIMIT_PER_MIN).

Only failures are recorded, and a success does not clear them: the windows simply expire.
"""

from __future__ import annotations

import math
import secrets
from functools import lru_cache

import redis
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.models import User

from ragmux.errors import ServiceError

PREFIX = "ragmux:signin"


class InvalidCredentials(ServiceError):
    status = 401
    code = "invalid_credentials"

    def __init__(self, *, attempts_remaining: int | None):
        extra = {} if attempts_remaining is None else {"attempts_remaining": attempts_remaining}
        # One message for unknown, wrong-password and deactivated users: no user enumeration.
        super().__init__("invalid username or password", **extra)


class SignInThrottled(ServiceError):
    status = 429
    code = "rate_limited"

    def __init__(self, *, locked: bool, retry_after: int):
        super().__init__("too many login attempts, try again later", locked=locked)
        self.locked = locked
        self.retry_after = retry_after


@lru_cache(maxsize=1)
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


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


def check_sign_in_allowed(*, username: str, address: str) -> None:
    """Raises SignInThrottled when this attempt must be refused without checking the password."""
    client = _redis()
    windows = _windows(username, address)
    now = _now(client)
    pipe = client.pipeline(transaction=False)
    for key, _, window in windows.values():
        # The oldest failure still inside the window, and how many there are.
        pipe.zrangebyscore(key, now - window, "+inf", start=0, num=1, withscores=True)
        pipe.zcount(key, now - window, "+inf")
    replies = iter(pipe.execute())
    counted = {which: (next(replies), next(replies)) for which in windows}
    if "pair" in counted:
        oldest, failures = counted["pair"]
        _, allowed, window = windows["pair"]
        if failures >= allowed:
            raise SignInThrottled(locked=True, retry_after=max(1, math.ceil(oldest[0][1] + window - now)))
    for which in ("user", "addr"):
        if which in counted and counted[which][1] >= windows[which][1]:
            raise SignInThrottled(locked=False, retry_after=max(1, math.ceil(windows[which][2])))


def record_sign_in_failure(*, username: str, address: str) -> int | None:
    """Counts a failed attempt; returns how many more the username has this minute (None when
    the per-user limit is off)."""
    client = _redis()
    windows = _windows(username, address)
    now = _now(client)
    member = f"{now}:{secrets.token_hex(4)}"
    pipe = client.pipeline(transaction=False)
    for key, _, window in windows.values():
        pipe.zadd(key, {member: now})
        pipe.zremrangebyscore(key, "-inf", now - window)
        pipe.expire(key, max(1, math.ceil(window)))
    if "user" not in windows:
        pipe.execute()
        return None
    user_key, allowed, _ = windows["user"]
    pipe.zcard(user_key)
    return max(0, allowed - pipe.execute()[-1])


def sign_in(*, request, username: str, password: str) -> User:
    """The user these credentials belong to, or InvalidCredentials / SignInThrottled."""
    address = client_address(request)
    check_sign_in_allowed(username=username, address=address)
    user = authenticate(request, username=username, password=password)
    if user is None:
        raise InvalidCredentials(attempts_remaining=record_sign_in_failure(username=username, address=address))
    return user
