"""The usage counters that rate limits and budgets are checked against (`usage_counters`).

PostgreSQL alone holds them, one row per (tier, owner, window): every web process and replica
reads and writes the same rows, and a restart loses nothing. Why the limits hold exactly under
concurrency:

- **Admission is one statement under one lock.** `ragmux_usage_admit` (usage_admit.sql) takes
  the project's transaction-scoped advisory lock, reads the counters, and for each call it was
  given, in turn, runs the call's checks in order and, when none denies, adds the call's request
  and its estimated tokens and micro-dollars to the reserved columns; then it writes the rows and
  commits. Two calls of a project are never checked on the same counter values: the second sees
  the first's reservation, whether it came in the same statement (a batch: the calls of a
  project that wait in one process, `gateway.clients.limiter`) or in an earlier one. So a budget denies once
  ``used + reserved >= budget``, whatever the concurrency, and exactly ``rpm`` calls of a minute
  get a request slot; a denied call reserves nothing, so it releases nothing.
- **Settlement swaps the estimate for the truth.** When a call's answer ends (answered or
  failed), the web process settles it here at once (`limiter.release`, the calls that ended
  meanwhile in one statement) with the tokens and the price its request log row will say; a call
  whose client left, or whose release could not be written, is settled by the ledger's writer
  thread (`gateway.clients.ledger`) with its row. The reservation leaves the reserved columns
  and the true usage enters the used ones, in the windows the call was admitted in, under the
  same lock. The checks count the calls in flight by their estimate and finished
  calls by their usage; only a single call can overshoot, by its own size.
- **Writers cannot deadlock, and hold the lock briefly:** each write is one statement
  (`ragmux_usage_admit`, `ragmux_usage_settle`) that takes its projects' locks
  (`ragmux_usage_lock`) before touching a row, in ascending project order, and commits at once.

The lock serialises a project's admissions, each one short statement without a round trip
inside it; calls to different projects do not wait for each other at all. A process sends one
statement per project at a time, for all the calls that came meanwhile, so under load the lock
changes hands once per batch, not once per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q

from gateway.clients.limits import (
    DAY,
    HELD,
    KEY,
    MICROS,
    MINUTE,
    MONTH,
    PERIODS,
    PROJECT,
    REQUESTS,
    TOKENS,
    Check,
    Counters,
    window_start,
)
from gateway.clients.models import UsageCounter
from ragmux.core import asyncdb

# How long each window's rows are kept (issue 24): minutes for the usage report's last hour and
# its margin, days for over a year of daily figures, months for three years.
RETENTION = {MINUTE: timedelta(hours=2), DAY: timedelta(days=400), MONTH: timedelta(days=3 * 366)}

_ADMIT = (
    "SELECT denied, requests, tokens, micros, held_tokens, held_micros FROM ragmux_usage_admit(%s, %s::text[], "
    "%s::timestamptz[], %s::bigint[], %s::int[], %s::bigint[], %s::bigint[], %s::int[], %s::text[], %s::text[], "
    "%s::text[], %s::bigint[], %s::bigint[])"
)
_SETTLE = (
    "SELECT ragmux_usage_settle(%s::bigint[], %s::text[], %s::bigint[], %s::text[], %s::timestamptz[], "
    "%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])"
)


@dataclass
class Admission:
    """A call's place in the counters: the windows it counts in and what it reserved there."""

    project_id: int
    key_id: int
    windows: dict[str, datetime]
    reserved: bool = False
    reserved_tokens: int = 0
    reserved_micros: int = 0
    # The counters after the admission, per (tier, period): see limits.Counters.
    counters: dict[tuple[str, str], Counters] = field(default_factory=dict)


def admission_windows(now: datetime) -> dict[str, datetime]:
    return {period: window_start(period, now) for period in PERIODS}


# The most tokens, and micro-dollars, one call reserves: far past any call a request can ask
# for, and small enough that the counters it is added to (bigint columns, as are the budgets)
# hold the reservations of tens of thousands of calls at once without overflowing.
MAX_RESERVATION = 2**48


@dataclass
class Claim:
    """One call's request for admission: its place in the counters, the checks it must pass, and
    what it reserves when it passes them (each clamped to MAX_RESERVATION)."""

    admission: Admission
    checks: list[Check]
    tokens: int
    micros: int
    # 1: the call's admission, which takes a request slot; 0: a top-up of an admitted call's
    # reservation (a RAG call's retrieved context), which adds tokens and micro-dollars only.
    requests: int = 1

    def __setattr__(self, name: str, value) -> None:
        if name in ("tokens", "micros"):
            value = min(value, MAX_RESERVATION)
        super().__setattr__(name, value)


def admit_params(claims: list[Claim]) -> tuple:
    """The parameters of ``ragmux_usage_admit`` for ``claims``: calls of one project, in the order
    they are checked, all in the first claim's windows."""
    first = claims[0].admission
    periods = list(first.windows)
    flat_checks = [(index, check) for index, claim in enumerate(claims, start=1) for check in claim.checks]
    return (
        first.project_id,
        periods,
        [first.windows[period] for period in periods],
        [claim.admission.key_id for claim in claims],
        [claim.requests for claim in claims],
        [claim.tokens for claim in claims],
        [claim.micros for claim in claims],
        [index for index, _ in flat_checks],
        [check.tier for _, check in flat_checks],
        [check.kind.period for _, check in flat_checks],
        [check.kind.column for _, check in flat_checks],
        [check.addend for _, check in flat_checks],
        [check.threshold for _, check in flat_checks],
    )


def admit_verdicts(claims: list[Claim], row: tuple) -> list[Check | None]:
    """Reads ``ragmux_usage_admit``'s answer into the claims' admissions (their counters, and
    what the admitted ones reserved); returns each claim's denying check, None when admitted."""
    denied, requests, tokens, micros, held_tokens, held_micros = row
    periods = list(claims[0].admission.windows)
    # Each call's counters: the project's windows, then its key's.
    places = [(tier, period) for tier in (PROJECT, KEY) for period in periods]
    verdicts: list[Check | None] = []
    for index, claim in enumerate(claims):
        start = index * len(places)
        claim.admission.counters = {
            place: {
                REQUESTS: requests[start + at],
                TOKENS: tokens[start + at],
                MICROS: micros[start + at],
                HELD[TOKENS]: held_tokens[start + at],
                HELD[MICROS]: held_micros[start + at],
            }
            for at, place in enumerate(places)
        }
        if denied[index]:
            verdicts.append(claim.checks[denied[index] - 1])
            continue
        admission = claim.admission
        admission.reserved = True
        admission.reserved_tokens += claim.tokens
        admission.reserved_micros += claim.micros
        verdicts.append(None)
    return verdicts


async def admit(claims: list[Claim]) -> list[Check | None]:
    """Runs each claim's checks, one claim after the other, each against the counters as the
    claims before it left them; reserves the request, tokens and micro-dollars of every claim
    that passes on both its tiers' windows. One statement, whatever the number of claims (calls
    of one project, in one set of windows). Returns each claim's denying check, None when
    admitted."""
    row = await asyncdb.fetch_one(_ADMIT, admit_params(claims))
    return admit_verdicts(claims, row)


@dataclass(frozen=True)
class Settlement:
    """What an admitted call turned out to spend."""

    admission: Admission
    prompt_tokens: int
    completion_tokens: int
    cost_micros: int


def _deltas(settlements: list[Settlement]) -> dict[tuple, list[int]]:
    """Each counter row's changes, summed over the calls (a row is written once per batch)."""
    rows: dict[tuple, list[int]] = {}
    for settlement in settlements:
        admission = settlement.admission
        reserved = admission.reserved
        change = [
            # A reserved call's request was counted when it took its slot.
            0 if reserved else 1,
            settlement.prompt_tokens,
            settlement.completion_tokens,
            settlement.cost_micros,
            -admission.reserved_tokens,
            -admission.reserved_micros,
        ]
        for tier, owner_id in ((PROJECT, admission.project_id), (KEY, admission.key_id)):
            for period, start in admission.windows.items():
                total = rows.setdefault((tier, owner_id, period, start), [0] * len(change))
                for index, value in enumerate(change):
                    total[index] += value
    return rows


def _settle_params(settlements: list[Settlement]) -> tuple:
    rows = _deltas(settlements)
    columns = [list(values) for values in zip(*(key + tuple(change) for key, change in rows.items()), strict=True)]
    projects = sorted({settlement.admission.project_id for settlement in settlements})
    return (projects, *columns)


def settle(*, settlements: list[Settlement]) -> None:
    """Moves each call from its reservation to its true usage, in one statement."""
    if not settlements:
        return
    with connection.cursor() as cursor:
        cursor.execute(_SETTLE, _settle_params(settlements))


async def settle_async(*, settlements: list[Settlement]) -> None:
    """:func:`settle` from the event loop: the release of calls whose answers have just ended."""
    if settlements:
        await asyncdb.execute(_SETTLE, _settle_params(settlements))


def usage_counter_purge(*, now: datetime) -> int:
    """Deletes the counter rows past their window's retention; returns how many went."""
    stale = Q()
    for period, kept in RETENTION.items():
        stale |= Q(period=period, period_start__lt=now - kept)
    return UsageCounter.objects.filter(stale).delete()[0]
