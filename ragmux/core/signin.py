"""Signing in with a username and password, behind the brute-force limiter.

Failed attempts are kept in Redis so every web process counts the same ones; while Redis is
down each process counts them itself (`LocalWindows`), so signing in never fails with Redis.
Three sliding windows are checked before a password is looked at:

- per (username, address) pair over LOGIN_LOCKOUT_MINUTES: the lockout;
- per (username, address) pair over one minute (LOGIN_USER_LIMIT_PER_MIN);
- per client address over one minute (LOGIN_RATE_LIMIT_PER_MIN), set higher than the pair's.

Keyed on the pair so a stranger guessing from elsewhere cannot lock the real user out, and an
attacker guessing one account from a shared address (a NAT, a proxy) cannot lock out the other
accounts signing in from it: a refused attempt is not counted, so one account's guesses stop at
the pair's limit, far below the address's.

Only failures count, and a success does not clear earlier ones: the windows simply expire.

Every attempt is audited with its outcome (`login.success`, `login.failure`, `login.throttled`,
`login.locked`), and so is signing out; the security page (`sign_in_report`) reads those rows
and the lockout windows.
"""

from __future__ import annotations

import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TypeVar

import redis
from django.conf import settings
from django.contrib.auth import authenticate, logout
from django.contrib.auth.models import User
from django.utils import timezone

from ragmux.core.audit import ANONYMOUS, audit_list, audit_record
from ragmux.core.authentication import bearer_token, revoke_admin_token
from ragmux.core.errors import RateLimited, Unauthenticated
from ragmux.core.models import AuditEntry
from ragmux.core.proxies import client_address
from ragmux.core.redis import redis_outage, shared_redis

PREFIX = "ragmux:signin"
PAIR_PREFIX = f"{PREFIX}:pair:"
PAIR_MINUTE_PREFIX = f"{PREFIX}:pair-minute:"

# What the audit trail calls each outcome of signing in and out.
LOGIN_SUCCESS = "login.success"
LOGIN_FAILURE = "login.failure"
LOGIN_THROTTLED = "login.throttled"
LOGIN_LOCKED = "login.locked"
LOGOUT = "logout"
# The refused attempts the security page lists.
LOGIN_REFUSALS = (LOGIN_FAILURE, LOGIN_THROTTLED, LOGIN_LOCKED)
# A sign-in row's outcome in words (a failure's own reason, when it recorded one, comes after).
OUTCOME_WORDS = {
    LOGIN_SUCCESS: "signed in",
    LOGIN_FAILURE: "refused",
    LOGIN_THROTTLED: "throttled: too many attempts this minute",
    LOGIN_LOCKED: "locked out: too many failures from this address",
}
RECENT_REFUSALS = 50

T = TypeVar("T")


class InvalidCredentials(Unauthenticated):
    code = "invalid_credentials"

    def __init__(self, *, attempts_remaining: int | None, deactivated: bool = False):
        extra = {} if attempts_remaining is None else {"attempts_remaining": attempts_remaining}
        # One message for unknown, wrong-password and deactivated users: no user enumeration.
        super().__init__("invalid username or password", **extra)
        # The right password of a deactivated account: only someone who knows it learns this.
        self.deactivated = deactivated


# Why a sign-in failed, as its audit row records it (the person is told only what is safe).
UNKNOWN_USERNAME = "unknown username"
WRONG_PASSWORD = "wrong password"
DEACTIVATED = "deactivated account"


def _failure_reason(username: str, password: str) -> str:
    user = User.objects.filter(username__iexact=username).first()
    if user is None:
        return UNKNOWN_USERNAME
    if not user.is_active and user.check_password(password):
        return DEACTIVATED
    return WRONG_PASSWORD


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
            f"{PAIR_PREFIX}{address}|{name}",
            settings.LOGIN_LOCKOUT_FAILURES,
            settings.LOGIN_LOCKOUT_MINUTES * 60,
        ),
        "user": (f"{PAIR_MINUTE_PREFIX}{address}|{name}", settings.LOGIN_USER_LIMIT_PER_MIN, minute),
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

    def failures(self, prefix: str) -> dict[str, list[float]]:
        """When each failure still held happened, per window whose key starts with ``prefix``."""
        with self._lock:
            return {key: sorted(at.values()) for key, at in self._failures.items() if key.startswith(prefix)}

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


def _redis_or_process(in_redis: Callable[[], T], in_process: Callable[[], T]) -> tuple[T, bool]:
    """``in_redis()``, or ``in_process()`` while Redis is down (never a 500); and which ran."""
    if not redis_outage.skip():
        try:
            answer = in_redis()
        except redis.RedisError as exc:
            redis_outage.failed(exc)
        else:
            redis_outage.succeeded()
            return answer, True
    return in_process(), False


def _count(windows: dict[str, tuple[str, int, float]]) -> tuple[float, str, Counts, bool]:
    """Counts the attempt in Redis, or in this process while Redis is down."""
    counted, in_redis = _redis_or_process(partial(_count_in_redis, windows), partial(_count_in_process, windows))
    if in_redis:
        _in_process.clear()  # Redis counts again; what this process counted alone is dropped
    return (*counted, in_redis)


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


def _audit_sign_in(action: str, *, username: str, user: User | None = None, reason: str = "") -> None:
    """A row for a sign-in attempt or a sign-out: the account is its object, by the name typed
    when no one was signed in; a failure's ``after`` holds its reason."""
    audit_record(
        actor=user,
        actor_username=None if user is not None else ANONYMOUS,
        action=action,
        object_type="user",
        object_id=user.pk if user is not None else None,
        object_repr=user.get_username() if user is not None else username,
        after={"reason": reason} if reason else None,
    )


def sign_in(*, request, username: str, password: str) -> User:
    """The user these credentials belong to, or InvalidCredentials / SignInThrottled. Each
    outcome is audited."""
    try:
        attempt = _begin_attempt(username=username, address=client_address(request))
    except SignInThrottled as refusal:
        _audit_sign_in(LOGIN_LOCKED if refusal.locked else LOGIN_THROTTLED, username=username)
        raise
    user = authenticate(request, username=username, password=password)
    if user is None:
        reason = _failure_reason(username, password)
        _audit_sign_in(LOGIN_FAILURE, username=username, reason=reason)
        raise InvalidCredentials(attempts_remaining=attempt.attempts_remaining, deactivated=reason == DEACTIVATED)
    _uncount(attempt)
    _audit_sign_in(LOGIN_SUCCESS, username=username, user=user)
    return user


def forget_failures(*, username: str) -> None:
    """Forgets the failed sign-ins counted against a user, from every address: an operator's way
    to lift a lockout (`ragmux reset-password`). While Redis is down each web process counts in
    its own memory, out of this command's reach: those windows simply expire."""
    name = username.lower()
    client = shared_redis()
    literal_name = re.sub(r"([*?\[\]\\])", r"\\\1", name)  # SCAN's glob must match the name as written
    try:
        keys = [
            key
            for prefix in (PAIR_PREFIX, PAIR_MINUTE_PREFIX)
            for key in client.scan_iter(match=f"{prefix}*|{literal_name}", count=1000)
        ]
        if keys:
            client.delete(*keys)
    except redis.RedisError as exc:
        redis_outage.failed(exc)


def sign_out(*, request) -> None:
    """Ends the caller's bearer token when it sent one, else its session; audited when someone
    was signed in."""
    user = request.user if request.user.is_authenticated else None
    token = bearer_token(request)
    if token is not None:
        revoke_admin_token(token=token)
    else:
        logout(request)
    if user is not None:
        _audit_sign_in(LOGOUT, username=user.get_username(), user=user)


# --- what the security page shows -------------------------------------------------------------


@dataclass(frozen=True)
class Lockout:
    username: str
    address: str
    until: datetime


def _pair_failures_in_redis(window: float) -> tuple[float, dict[str, list[float]]]:
    client = shared_redis()
    now = _now(client)
    keys = list(client.scan_iter(match=f"{PAIR_PREFIX}*", count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.zrangebyscore(key, now - window, "+inf", withscores=True)
    replies = pipe.execute()
    return now, {key.decode(): [at for _, at in failures] for key, failures in zip(keys, replies, strict=True)}


def _pair_failures_in_process(window: float) -> tuple[float, dict[str, list[float]]]:
    now = time.time()
    pairs = _in_process.failures(PAIR_PREFIX)
    return now, {key: [at for at in failures if at > now - window] for key, failures in pairs.items()}


def active_lockouts() -> list[Lockout]:
    """The (username, address) pairs the limiter refuses now, by its own rule: as many failures
    in the lockout window as LOGIN_LOCKOUT_FAILURES, until the oldest leaves the window. Read
    where the limiter counts (this process's own count while Redis is down); soonest to end
    last. None while the lockout is off."""
    limit, window = settings.LOGIN_LOCKOUT_FAILURES, settings.LOGIN_LOCKOUT_MINUTES * 60
    if not (limit and window):
        return []
    (now, pairs), _ = _redis_or_process(
        partial(_pair_failures_in_redis, window), partial(_pair_failures_in_process, window)
    )
    lockouts = []
    for key, failures in pairs.items():
        if len(failures) >= limit:
            # Usernames are any text typed; an address never holds the separator.
            address, _, username = key.removeprefix(PAIR_PREFIX).partition("|")
            until = datetime.fromtimestamp(min(failures) + window, tz=UTC)
            lockouts.append(Lockout(username=username, address=address, until=until))
    return sorted(lockouts, key=lambda lockout: lockout.until, reverse=True)


@dataclass(frozen=True)
class SignInReport:
    failed_last_hour: int
    failed_last_24h: int
    recent_refusals: list[AuditEntry]
    active_lockouts: list[Lockout]


def sign_in_report(*, now: datetime | None = None) -> SignInReport:
    """Wrong passwords in the last hour and day (from the audit trail), the latest refused
    attempts of the day with their addresses, and the lockouts in force."""
    now = now or timezone.now()
    refusals = audit_list(since=now - timedelta(days=1)).filter(action__in=LOGIN_REFUSALS)
    failures = refusals.filter(action=LOGIN_FAILURE)
    return SignInReport(
        failed_last_hour=failures.filter(created_at__gte=now - timedelta(hours=1)).count(),
        failed_last_24h=failures.count(),
        recent_refusals=list(refusals[:RECENT_REFUSALS]),
        active_lockouts=active_lockouts(),
    )
