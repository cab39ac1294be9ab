"""The usage report's arithmetic: fixed UTC windows, percentages and the forecast, frozen clocks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gateway.clients.limits import DAY, MINUTE, MONTH
from gateway.clients.usage_windows import exhausted_at, percent_of, window_at


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("name", "now", "start", "resets_at"),
    [
        (MINUTE, "2026-09-18T12:00:30.5+00:00", "2026-09-18T12:00:00+00:00", "2026-09-18T12:01:00+00:00"),
        (MINUTE, "2026-12-31T23:59:59+00:00", "2026-12-31T23:59:00+00:00", "2027-01-01T00:00:00+00:00"),
        (DAY, "2026-09-18T12:00:30+00:00", "2026-09-18T00:00:00+00:00", "2026-09-19T00:00:00+00:00"),
        (DAY, "2026-02-28T23:00:00+00:00", "2026-02-28T00:00:00+00:00", "2026-03-01T00:00:00+00:00"),
        (MONTH, "2026-09-18T12:00:30+00:00", "2026-09-01T00:00:00+00:00", "2026-10-01T00:00:00+00:00"),
        (MONTH, "2026-12-31T23:59:59+00:00", "2026-12-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"),
        # A clock in another zone is the same instant: the window is UTC's.
        (DAY, "2026-09-19T01:30:00+02:00", "2026-09-18T00:00:00+00:00", "2026-09-19T00:00:00+00:00"),
    ],
)
def test_windows_are_fixed_utc_minutes_days_and_months(name, now, start, resets_at):
    window = window_at(name, at(now))
    assert (window.start, window.resets_at) == (at(start), at(resets_at))
    assert window.start.tzinfo == UTC


def test_window_names_are_checked():
    with pytest.raises(ValueError):
        window_at("week", datetime(2026, 9, 18, tzinfo=UTC))


@pytest.mark.parametrize(
    ("used", "limit", "percent"),
    [(0, 0, 0.0), (5, 0, 0.0), (1, 3, 33.3), (2, 3, 66.7), (3, 3, 100.0), (12, 5, 100.0), (1, 1000, 0.1)],
)
def test_percent_is_capped_and_rounded_to_one_decimal(used, limit, percent):
    assert percent_of(used, limit) == percent


NOW = datetime(2026, 9, 18, 12, 0, 30, 250_000, tzinfo=UTC)
END_OF_DAY = datetime(2026, 9, 19, tzinfo=UTC)


@pytest.mark.parametrize(
    ("used", "limit", "recent", "resets_at", "expected"),
    [
        # 1,000 left at 400 an hour: 2.5 hours, to the second.
        (9_000, 10_000, 400, END_OF_DAY, datetime(2026, 9, 18, 14, 30, 30, tzinfo=UTC)),
        # 7 left at 3 an hour: 2 h 20 min exactly; fractions of a second are cut.
        (3, 10, 3, END_OF_DAY, datetime(2026, 9, 18, 14, 20, 30, tzinfo=UTC)),
        (1, 10, 7, END_OF_DAY, datetime(2026, 9, 18, 13, 17, 38, tzinfo=UTC)),
        # Reached or passed: now (the report's generated_at).
        (10_000, 10_000, 0, END_OF_DAY, datetime(2026, 9, 18, 12, 0, 30, tzinfo=UTC)),
        (12_000, 10_000, 50, END_OF_DAY, datetime(2026, 9, 18, 12, 0, 30, tzinfo=UTC)),
        # The window resets first.
        (0, 10_000, 400, END_OF_DAY, None),
        # Nothing in the last hour, or no budget.
        (9_000, 10_000, 0, END_OF_DAY, None),
        (9_000, 0, 400, END_OF_DAY, None),
        # A trickle against a vast budget: far past any reset, never a date overflow.
        (0, 2**63 - 1, 1, END_OF_DAY, None),
    ],
)
def test_forecast_at_the_last_hours_rate(used, limit, recent, resets_at, expected):
    assert exhausted_at(used=used, limit=limit, recent=recent, now=NOW, resets_at=resets_at) == expected


def test_forecast_just_before_the_reset_is_none_and_just_inside_is_a_time():
    # 60 left at 60 an hour is an hour away.
    reset_in_an_hour = NOW.replace(microsecond=0) + timedelta(hours=1)
    assert exhausted_at(used=40, limit=100, recent=60, now=NOW, resets_at=reset_in_an_hour) is None
    later = reset_in_an_hour + timedelta(seconds=1)
    assert exhausted_at(used=40, limit=100, recent=60, now=NOW, resets_at=later) == reset_in_an_hour


def test_forecast_answers_in_utc_whatever_the_clock_zone():
    local_now = NOW.astimezone(timezone(timedelta(hours=-5)))
    forecast = exhausted_at(used=9_000, limit=10_000, recent=400, now=local_now, resets_at=END_OF_DAY)
    assert (forecast, forecast.tzinfo) == (datetime(2026, 9, 18, 14, 30, 30, tzinfo=UTC), UTC)
