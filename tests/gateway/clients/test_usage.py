"""The usage counters: admission in batches (exactly the verdicts of one call at a time), and
retention (minute rows go after 2 hours, day rows after 400 days, month rows after 3 years, by
the scheduler's hourly sweep)."""

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


# --------------------------------------------------------------------------------------------
# Admission in batches (usage.admit, ragmux_usage_admit)
# --------------------------------------------------------------------------------------------

PROJECT_ID, KEY_A, KEY_B = 7001, 8001, 8002


def _limits(**values):
    from types import SimpleNamespace

    from gateway.clients.models import LIMIT_FIELDS

    return SimpleNamespace(**{name: values.get(name, 0) for name in LIMIT_FIELDS})


def _claim(key_id: int, tokens: int, micros: int = 0, project_limits=None, key_limits=None, now: datetime = NOW):
    from gateway.clients import limits, usage

    checks = limits.plan(project=project_limits or _limits(), key=key_limits or _limits(), estimate_tokens=tokens)
    admission = usage.Admission(project_id=PROJECT_ID, key_id=key_id, windows=usage.admission_windows(now))
    return usage.Claim(admission=admission, checks=checks, tokens=tokens, micros=micros)


def test_a_batchs_checks_are_flattened_with_the_index_of_their_call():
    from gateway.clients.usage import admit_params

    first = _claim(KEY_A, 30, 5, key_limits=_limits(rate_limit_rpm=2))
    second = _claim(
        KEY_B, 40, 6, project_limits=_limits(budget_daily_tokens=100), key_limits=_limits(rate_limit_tpm=90)
    )
    (
        project,
        periods,
        starts,
        keys,
        requests,
        tokens,
        micros,
        calls,
        tiers,
        check_periods,
        columns,
        addends,
        thresholds,
    ) = admit_params([first, second])
    assert (project, periods, keys, requests, tokens, micros) == (
        PROJECT_ID,
        ["minute", "day", "month"],
        [KEY_A, KEY_B],
        [1, 1],
        [30, 40],
        [5, 6],
    )
    day = datetime(2026, 12, 1, tzinfo=UTC)
    assert starts == [datetime(2026, 12, 1, 16, 30, tzinfo=UTC), day, day]  # the month starts that day too
    assert list(zip(calls, tiers, check_periods, columns, addends, thresholds, strict=True)) == [
        (1, "key", "minute", "requests", 1, 2),
        (2, "project", "day", "tokens", 0, 99),
        (2, "key", "minute", "tokens", 40, 90),
    ]


def test_a_batchs_answer_gives_each_call_its_counters_and_its_verdict():
    from gateway.clients.usage import admit_verdicts

    admitted = _claim(KEY_A, 30, 5, key_limits=_limits(rate_limit_rpm=2))
    refused = _claim(KEY_A, 40, 6, key_limits=_limits(rate_limit_rpm=2))
    # Per call: the project's minute, day, month, then its key's.
    row = ([0, 1], *(list(range(start, start + 12)) for start in (1, 101, 201, 301, 401)))
    assert admit_verdicts([admitted, refused], row) == [None, refused.checks[0]]
    held = {"held_tokens": 301, "held_micros": 401}
    assert admitted.admission.counters[("project", "minute")] == {"requests": 1, "tokens": 101, "micros": 201, **held}
    held = {"held_tokens": 306, "held_micros": 406}
    assert admitted.admission.counters[("key", "month")] == {"requests": 6, "tokens": 106, "micros": 206, **held}
    held = {"held_tokens": 307, "held_micros": 407}
    assert refused.admission.counters[("project", "minute")] == {"requests": 7, "tokens": 107, "micros": 207, **held}
    assert (admitted.admission.reserved, admitted.admission.reserved_tokens, admitted.admission.reserved_micros) == (
        True,
        30,
        5,
    )
    assert (refused.admission.reserved, refused.admission.reserved_tokens) == (False, 0)


def _admit_on_the_event_loop(batches):
    """Runs each batch of claims through usage.admit in turn; returns the verdicts."""
    import asyncio

    from gateway.clients import usage
    from ragmux.core import asyncdb

    async def run():
        try:
            return [await usage.admit(batch) for batch in batches]
        finally:
            await asyncdb.close()

    return asyncio.run(run())


def _window_counters():
    from gateway.clients.models import UsageCounter

    return {
        (row.tier, row.owner_id, row.period): (row.requests, row.reserved_tokens, row.reserved_micros)
        for row in UsageCounter.objects.all()
    }


def _mixed_claims():
    """Calls of two keys: the project allows 1,000 tokens a day, key A two calls a minute, key B
    300 tokens a minute, and the project $0.000100 a month."""
    project = _limits(budget_daily_tokens=1000, budget_monthly_usd_micros=100)
    key_a, key_b = _limits(rate_limit_rpm=2), _limits(rate_limit_tpm=300)
    return [
        _claim(KEY_A, 200, 30, project, key_a),  # admitted
        _claim(KEY_B, 250, 30, project, key_b),  # admitted
        _claim(KEY_B, 100, 10, project, key_b),  # key B's tpm: 250 + 100 > 300
        _claim(KEY_A, 300, 30, project, key_a),  # admitted: key A's second call
        _claim(KEY_A, 10, 1, project, key_a),  # key A's rpm: 2 + 1 > 2
        _claim(KEY_B, 40, 10, project, key_b),  # admitted: 750 tokens, 100 micro-dollars reached now
        _claim(KEY_B, 1, 1, project, key_b),  # the project's monthly dollar budget: 100 >= 100
    ]


@pytest.mark.django_db(transaction=True)
def test_a_batch_admits_exactly_the_calls_that_one_at_a_time_would_admit():
    from gateway.clients.models import UsageCounter

    [batched] = _admit_on_the_event_loop([_mixed_claims()])
    batched_counters = _window_counters()
    UsageCounter.objects.all().delete()
    alone = [verdict for [verdict] in _admit_on_the_event_loop([[claim] for claim in _mixed_claims()])]

    codes = [None if verdict is None else (verdict.kind.code, verdict.tier) for verdict in batched]
    assert codes == [
        None,
        None,
        ("rate_limit_tpm", "key"),
        None,
        ("rate_limit_rpm", "key"),
        None,
        ("budget_monthly_usd", "project"),
    ]
    assert [None if verdict is None else (verdict.kind.code, verdict.tier) for verdict in alone] == codes
    assert _window_counters() == batched_counters
    for period in ("minute", "day", "month"):
        assert batched_counters["project", PROJECT_ID, period] == (4, 790, 100)
        assert batched_counters["key", KEY_A, period] == (2, 500, 60)
        assert batched_counters["key", KEY_B, period] == (2, 290, 40)


@pytest.mark.django_db(transaction=True)
def test_each_call_of_a_batch_sees_the_counters_the_calls_before_it_left():
    claims = _mixed_claims()
    _admit_on_the_event_loop([claims])
    assert [claim.admission.counters["project", "day"]["tokens"] for claim in claims] == [
        200,
        450,
        450,
        750,
        750,
        790,
        790,
    ]
    assert [claim.admission.counters["key", "minute"]["requests"] for claim in claims] == [1, 1, 1, 2, 2, 2, 2]
