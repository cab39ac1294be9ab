"""The usage counters that rate limits and budgets are checked against (`usage_counters`).

PostgreSQL alone holds them, one row per (tier, owner, window): every web process and replica
reads and writes the same rows, and a restart loses nothing. Why the limits hold exactly under
concurrency:

- **Admission is one statement under one lock.** `ragmux_usage_reserve` (migration 0007) takes
  the project's transaction-scoped advisory lock, reads the counters, runs the checks in order
  and, when none denies, adds the call's request and its estimated tokens and micro-dollars to
  the reserved columns, then commits. Two calls of a project are never checked on the same
  counter values: the second sees the first's reservation. So a budget denies once
  ``used + reserved >= budget``, whatever the concurrency, and exactly ``rpm`` calls of a minute
  get a request slot; a denied call reserves nothing, so it releases nothing.
- **Settlement swaps the estimate for the truth.** When a call ends (answered, failed, or its
  client gone), the ledger's writer thread (`gateway.clients.ledger`) settles it here with the
  tokens and the price it writes to the call's request log row: the reservation leaves the
  reserved columns and the true usage enters the used ones, in the windows the call was admitted
  in, under the same lock. The checks count the calls in flight by their estimate and finished
  calls by their usage; only a single call can overshoot, by its own size.
- **Writers cannot deadlock, and hold the lock briefly:** each write is one statement
  (`ragmux_usage_reserve`, `ragmux_usage_settle`) that takes its projects' locks
  (`ragmux_usage_lock`) before touching a row, in ascending project order, and commits at once.

The lock serialises a project's admissions, each one short statement without a round trip
inside it; calls to different projects do not wait for each other at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q

from gateway.clients.limits import (
    DAY,
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

_RESERVE = (
    "SELECT denied, tiers, periods, requests, tokens, micros FROM ragmux_usage_reserve("
    "%s, %s, %s::text[], %s::timestamptz[], %s, %s, %s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[])"
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


async def reserve(admission: Admission, *, checks: list[Check], tokens: int, micros: int) -> Check | None:
    """Runs ``checks`` and, when none denies, reserves the call's request, ``tokens`` and
    ``micros`` on both tiers' windows; returns the check that denied, if one did."""
    periods = list(admission.windows)
    row = await asyncdb.fetch_one(
        _RESERVE,
        (
            admission.project_id,
            admission.key_id,
            periods,
            [admission.windows[period] for period in periods],
            tokens,
            micros,
            [check.tier for check in checks],
            [check.kind.period for check in checks],
            [check.kind.column for check in checks],
            [check.addend for check in checks],
            [check.threshold for check in checks],
        ),
    )
    denied_index, tiers, row_periods, requests, used_tokens, used_micros = row
    admission.counters = {
        (tier, period): {REQUESTS: requests_, TOKENS: tokens_, MICROS: micros_}
        for tier, period, requests_, tokens_, micros_ in zip(
            tiers, row_periods, requests, used_tokens, used_micros, strict=True
        )
    }
    if denied_index:
        return checks[denied_index - 1]
    admission.reserved, admission.reserved_tokens, admission.reserved_micros = True, tokens, micros
    return None


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


def settle(*, settlements: list[Settlement]) -> None:
    """Moves each call from its reservation to its true usage, in one statement."""
    if not settlements:
        return
    rows = _deltas(settlements)
    columns = [list(values) for values in zip(*(key + tuple(change) for key, change in rows.items()), strict=True)]
    projects = sorted({settlement.admission.project_id for settlement in settlements})
    with connection.cursor() as cursor:
        cursor.execute(_SETTLE, [projects, *columns])


def usage_counter_purge(*, now: datetime) -> int:
    """Deletes the counter rows past their window's retention; returns how many went."""
    stale = Q()
    for period, kept in RETENTION.items():
        stale |= Q(period=period, period_start__lt=now - kept)
    return UsageCounter.objects.filter(stale).delete()[0]
