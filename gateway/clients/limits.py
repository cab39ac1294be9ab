"""The policy of rate limits and budgets: pure arithmetic over counter values, no database.

A call is admitted by checking, in the reference's order (§5.2), every configured limit of its
project (tier ``project``) and of its key (tier ``key``):

    monthly budgets, daily budgets, tokens per minute, requests per minute

each window's project tier before its key tier, and each tier's dollar budget beside its token
budget. The first violated limit denies. The counters these checks read belong to
`gateway.clients.usage`, which runs the checks under the project's lock; this module says what
to check (:func:`plan`), and what a verdict means for the client: the denial's code,
message and ``Retry-After`` (:func:`denial`), and the ``x-ratelimit-*`` and
``x-ragmux-budget-*`` headers (:func:`limit_headers`).

Every check is "``current + addend > threshold`` denies", where ``current`` is the tier's
counter of that window before the call:

- a budget denies when ``used + reserved >= budget`` (reaching it blocks the next call, with the
  calls in flight counted): addend 0, threshold ``budget - 1``;
- tokens per minute deny when ``used + reserved + estimate > tpm``; a call estimated larger than
  the limit on its own could never pass that, so it is admitted when the minute is otherwise
  unused (``used + reserved > 0`` denies), as a budget lets one call overshoot by its own size;
- requests per minute deny when ``requests + 1 > rpm`` (the slot the call would take).

A RAG call is admitted on what the client sent, then topped up once retrieval has found its
context (:func:`top_up_plan`): the budgets and the tokens per minute are checked again, this time
with the call's own reservation left out, so the call passes when it would have passed had its
size been known at admission (no request slot is taken twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gateway.clients.models import SpendLimits
from ragmux.core.units import micros_to_dollars

MINUTE, DAY, MONTH = "minute", "day", "month"
PERIODS = (MINUTE, DAY, MONTH)
PROJECT, KEY = "project", "key"
TIERS = (PROJECT, KEY)
# The counter columns a check reads: requests, tokens used and reserved, micro-dollars used and reserved.
REQUESTS, TOKENS, MICROS = "requests", "tokens", "micros"
# Beside them, the part of the tokens and of the micro-dollars that calls in flight have reserved.
HELD = {TOKENS: "held_tokens", MICROS: "held_micros"}
# The Retry-After of a refusal that calls in flight caused, not spend: their reservations are
# released as each answer ends, so a retry has a chance within seconds.
IN_FLIGHT_RETRY_SECONDS = 1


@dataclass(frozen=True)
class LimitKind:
    """One kind of limit: the field that sets it, the window and counter it is checked on."""

    code: str
    field: str
    period: str
    column: str
    # OpenAI's error type for the 429.
    error_type: str


BUDGET_MONTHLY = LimitKind("budget_monthly", "budget_monthly_tokens", MONTH, TOKENS, "insufficient_quota")
BUDGET_MONTHLY_USD = LimitKind("budget_monthly_usd", "budget_monthly_usd_micros", MONTH, MICROS, "insufficient_quota")
BUDGET_DAILY = LimitKind("budget_daily", "budget_daily_tokens", DAY, TOKENS, "insufficient_quota")
BUDGET_DAILY_USD = LimitKind("budget_daily_usd", "budget_daily_usd_micros", DAY, MICROS, "insufficient_quota")
RATE_LIMIT_TPM = LimitKind("rate_limit_tpm", "rate_limit_tpm", MINUTE, TOKENS, "rate_limit_exceeded")
RATE_LIMIT_RPM = LimitKind("rate_limit_rpm", "rate_limit_rpm", MINUTE, REQUESTS, "rate_limit_exceeded")

# Checked in this order, window by window; within a window, the project tier before the key tier.
CHECK_ORDER: tuple[tuple[LimitKind, ...], ...] = (
    (BUDGET_MONTHLY, BUDGET_MONTHLY_USD),
    (BUDGET_DAILY, BUDGET_DAILY_USD),
    (RATE_LIMIT_TPM,),
    (RATE_LIMIT_RPM,),
)
BUDGETS = (BUDGET_MONTHLY, BUDGET_MONTHLY_USD, BUDGET_DAILY, BUDGET_DAILY_USD)
DOLLAR_BUDGETS = (BUDGET_MONTHLY_USD, BUDGET_DAILY_USD)


def window_start(period: str, now: datetime) -> datetime:
    """The start of ``now``'s fixed UTC window (minute, day or calendar month)."""
    now = now.astimezone(UTC)
    if period == MINUTE:
        return now.replace(second=0, microsecond=0)
    if period == DAY:
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period != MONTH:
        raise ValueError(f"unknown window: {period!r}")
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def window_end(period: str, start: datetime) -> datetime:
    if period == MINUTE:
        return start + timedelta(minutes=1)
    if period == DAY:
        return start + timedelta(days=1)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def seconds_until_reset(period: str, now: datetime) -> int:
    """Whole seconds (ceil, at least 1) until ``now``'s window of ``period`` ends: `Retry-After`."""
    left = (window_end(period, window_start(period, now)) - now).total_seconds()
    return max(1, math.ceil(left))


@dataclass(frozen=True)
class Check:
    """One configured limit of one tier, as the counter store runs it."""

    kind: LimitKind
    tier: str
    limit: int
    addend: int
    threshold: int


def _tokens_per_minute(tier: str, limit: int, held: int, estimate_tokens: int) -> Check:
    """The tokens-per-minute check of a call that holds ``held`` tokens already and asks for
    ``estimate_tokens`` more: they must fit beside the minute's other calls, or, when the call is
    larger than the limit, the minute must have no other call."""
    if held + estimate_tokens > limit:
        return Check(RATE_LIMIT_TPM, tier, limit, addend=-held, threshold=0)
    return Check(RATE_LIMIT_TPM, tier, limit, addend=estimate_tokens, threshold=limit)


def _check(kind: LimitKind, tier: str, limit: int, estimate_tokens: int) -> Check:
    if kind is RATE_LIMIT_RPM:
        return Check(kind, tier, limit, addend=1, threshold=limit)
    if kind is RATE_LIMIT_TPM:
        return _tokens_per_minute(tier, limit, 0, estimate_tokens)
    return Check(kind, tier, limit, addend=0, threshold=limit - 1)


def _configured(project: SpendLimits, key: SpendLimits, kinds: tuple[LimitKind, ...]):
    """(kind, tier, limit) of every configured limit among ``kinds``, in the order they are checked."""
    for window in CHECK_ORDER:
        for tier, limits in ((PROJECT, project), (KEY, key)):
            for kind in window:
                limit = getattr(limits, kind.field)
                if kind in kinds and limit > 0:
                    yield kind, tier, limit


def plan(*, project: SpendLimits, key: SpendLimits, estimate_tokens: int) -> list[Check]:
    """Every configured limit of both tiers, in the order they are checked (empty: nothing to check)."""
    kinds = tuple(kind for window in CHECK_ORDER for kind in window)
    return [_check(kind, tier, limit, estimate_tokens) for kind, tier, limit in _configured(project, key, kinds)]


def top_up_plan(
    *, project: SpendLimits, key: SpendLimits, held_tokens: int, held_micros: int, estimate_tokens: int
) -> list[Check]:
    """The checks of an admitted call that reserves ``estimate_tokens`` more (and their price),
    holding ``held_tokens`` and ``held_micros`` already: each budget must not be reached by the
    other calls, and the tokens per minute must fit as at admission, the call counted whole."""
    checks = []
    for kind, tier, limit in _configured(project, key, (*BUDGETS, RATE_LIMIT_TPM)):
        if kind is RATE_LIMIT_TPM:
            checks.append(_tokens_per_minute(tier, limit, held_tokens, estimate_tokens))
        else:
            held = held_micros if kind.column == MICROS else held_tokens
            checks.append(Check(kind, tier, limit, addend=-held, threshold=limit - 1))
    return checks


def has_dollar_budget(*tiers: SpendLimits) -> bool:
    return any(getattr(limits, kind.field) > 0 for limits in tiers for kind in DOLLAR_BUDGETS)


# The counters of one tier's window: requests, tokens (used + reserved), micro-dollars (used + reserved).
Counters = dict[str, int]


@dataclass(frozen=True)
class Denial:
    code: str
    error_type: str
    scope: str
    message: str
    retry_after: int


def _subject(tier: str) -> str:
    return "this project" if tier == PROJECT else "this api key"


def dollars(micros: int) -> str:
    """Micro-dollars as dollars with every digit that is not a trailing zero (at least cents):
    $0.01044, $0.0087, $1.00."""
    whole, fraction = f"{micros_to_dollars(micros):.6f}".split(".")
    return f"${whole}.{fraction.rstrip('0').ljust(2, '0')}"


def _amount(column: str, value: int) -> str:
    return dollars(value) if column == MICROS else f"{value} tokens"


def denial(check: Check, counters: Counters, now: datetime) -> Denial:
    """What the client is told when ``check`` denies; ``counters`` are its window's, after the
    calls checked before it. A refusal that the reservations of calls in flight caused, where
    spend alone would have passed, says so and asks for a retry within seconds."""
    kind, subject = check.kind, _subject(check.tier)
    used = counters[kind.column]
    held = counters[HELD[kind.column]] if kind.column in HELD else 0
    in_flight = held > 0 and used - held + max(check.addend, 0) <= check.threshold
    retry_after = seconds_until_reset(kind.period, now)
    if in_flight:
        retry_after = min(IN_FLIGHT_RETRY_SECONDS, retry_after)
    if kind is RATE_LIMIT_RPM:
        message = f"Rate limit reached: {check.limit} requests per minute for {subject}."
    elif kind is RATE_LIMIT_TPM and check.threshold == 0:
        message = (
            f"Rate limit reached: {check.limit} tokens per minute for {subject}; this call's estimate is larger "
            "than the limit, so it is admitted only in a minute no other call uses."
        )
    elif kind is RATE_LIMIT_TPM:
        message = f"Rate limit reached: {check.limit} tokens per minute for {subject}."
    else:
        window = "Daily" if kind.period == DAY else "Monthly"
        unit = "dollar" if kind.column == MICROS else "token"
        if in_flight:
            message = f"{window} {unit} budget of {subject} is held by calls in progress."
        elif kind.column == MICROS:
            message = f"{window} dollar budget exhausted ({dollars(used)} of {dollars(check.limit)} spent)."
        else:
            message = f"{window} token budget exhausted ({used} of {check.limit} tokens used)."
    if in_flight:
        message += (
            f" {_amount(kind.column, used - held)} used and {_amount(kind.column, held)} reserved by calls not "
            f"finished yet, of {_amount(kind.column, check.limit)}; a reservation is released when its call ends."
        )
    return Denial(kind.code, kind.error_type, check.tier, f"{message} Retry after {retry_after} seconds.", retry_after)


def _remaining_text(kind: LimitKind, remaining: int) -> str:
    return str(micros_to_dollars(remaining)) if kind.column == MICROS else str(remaining)


# The headers each kind of limit is reported in: its limit (None: not sent), remaining, reset.
_HEADERS: dict[str, tuple[str | None, str, str | None]] = {
    RATE_LIMIT_RPM.code: (
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ),
    RATE_LIMIT_TPM.code: ("x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
    BUDGET_DAILY.code: (None, "x-ragmux-budget-daily-remaining", None),
    BUDGET_MONTHLY.code: (None, "x-ragmux-budget-monthly-remaining", None),
    BUDGET_DAILY_USD.code: (None, "x-ragmux-budget-daily-usd-remaining", None),
    BUDGET_MONTHLY_USD.code: (None, "x-ragmux-budget-monthly-usd-remaining", None),
}
HEADER_NAMES = tuple(name for names in _HEADERS.values() for name in names if name is not None)


def limit_headers(
    checks: list[Check], counters: dict[tuple[str, str], Counters], now: datetime, denied: Check | None = None
) -> dict[str, str]:
    """The headers of every configured limit, from the counters after this call's reservation.

    Where both tiers limit the same thing, the tier with less left is reported (the key tier
    wins a tie only when the project has no such limit); on a denial the denying tier is
    reported, with nothing left."""
    chosen: dict[str, tuple[Check, int]] = {}
    for check in checks:
        used = counters[check.tier, check.kind.period][check.kind.column]
        remaining = max(check.limit - used, 0)
        if denied is not None and check.kind is denied.kind:
            if check is denied:
                chosen[check.kind.code] = (check, 0)
            continue
        current = chosen.get(check.kind.code)
        if current is None or remaining < current[1]:
            chosen[check.kind.code] = (check, remaining)
    headers = {}
    for code, (check, remaining) in chosen.items():
        limit_name, remaining_name, reset_name = _HEADERS[code]
        if limit_name is not None:
            headers[limit_name] = str(check.limit)
        headers[remaining_name] = _remaining_text(check.kind, remaining)
        if reset_name is not None:
            headers[reset_name] = str(seconds_until_reset(check.kind.period, now))
    return headers
