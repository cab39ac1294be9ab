"""The usage counters' retention: minute rows go after 2 hours, day rows after 400 days, month
rows after 3 years, by the scheduler's hourly sweep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

NOW = datetime(2026, 12, 1, 16, 30, tzinfo=UTC)


def _row(period: str, start: datetime):
    from gateway.clients.models import UsageCounter

    return UsageCounter.objects.create(
        tier="project",
        owner_id=1,
        period=period,
        period_start=start,
        requests=1,
        prompt_tokens=1,
        completion_tokens=1,
        cost_micros=1,
        reserved_tokens=0,
        reserved_micros=0,
    )


@pytest.mark.django_db
def test_counters_past_their_windows_retention_are_purged():
    from gateway.clients.models import UsageCounter
    from gateway.clients.usage import usage_counter_purge

    kept = [
        _row("minute", NOW - timedelta(hours=2)),
        _row("day", NOW - timedelta(days=400)),
        _row("month", datetime(2024, 1, 1, tzinfo=UTC)),
    ]
    _row("minute", NOW - timedelta(hours=2, minutes=1))
    _row("day", NOW - timedelta(days=401))
    _row("month", datetime(2023, 11, 1, tzinfo=UTC))
    assert usage_counter_purge(now=NOW) == 3
    assert set(UsageCounter.objects.values_list("pk", flat=True)) == {row.pk for row in kept}


def test_the_scheduler_runs_the_purge(settings):
    from ragmux.celery import app

    [entry] = [
        entry for entry in settings.CELERY_BEAT_SCHEDULE.values() if entry["task"] == "gateway.purge_usage_counters"
    ]
    assert entry["schedule"] <= 3600
    app.loader.import_default_modules()
    assert "gateway.purge_usage_counters" in app.tasks
