"""Fixed UTC usage windows and the arithmetic of the usage report, without a database.

The windows are the limits' (`gateway.clients.limits`): a UTC minute, a UTC day and a calendar
month, each starting at its truncation of the clock, never sliding.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gateway.clients.limits import window_end, window_start

# The forecast's rate is what was spent in this last stretch of time.
FORECAST_RATE_SPAN = timedelta(hours=1)


@dataclass(frozen=True)
class Window:
    name: str
    start: datetime
    resets_at: datetime


def window_at(name: str, now: datetime) -> Window:
    """The window of kind ``name`` (minute, day, month) that ``now`` falls in, in UTC: the one the
    limits are checked in."""
    start = window_start(name, now)
    return Window(name, start, window_end(name, start))


def percent_of(used: int, limit: int) -> float:
    """100·used/limit, capped at 100 and rounded to one decimal; 0 without a limit."""
    if limit <= 0:
        return 0.0
    return round(min(100.0, 100.0 * used / limit), 1)


def exhausted_at(*, used: int, limit: int, recent: int, now: datetime, resets_at: datetime) -> datetime | None:
    """When a budget of ``limit`` with ``used`` spent in its window runs out, if what was spent in
    the last `FORECAST_RATE_SPAN` (``recent``) goes on at the same rate.

    ``now`` when it already has; None without a budget, without recent spend, or when the window
    resets first. Truncated to whole seconds.
    """
    if limit <= 0:
        return None
    now = now.astimezone(UTC).replace(microsecond=0)
    if used >= limit:
        return now
    if recent <= 0:
        return None
    seconds = FORECAST_RATE_SPAN.total_seconds() * (limit - used) / recent
    # Past any date a window can reset at (a month is at most 31 days): no need to build it.
    if seconds >= timedelta(days=32).total_seconds():
        return None
    projected = now + timedelta(seconds=int(seconds))
    return None if projected >= resets_at else projected
