"""The policy of rate limits and budgets, without a database: what is checked in which order,
what a denial says, and the headers."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from gateway.clients import limits
from gateway.clients.models import LIMIT_FIELDS

NOW = datetime(2026, 12, 31, 23, 59, 17, 400_000, tzinfo=UTC)


def spend_limits(**values) -> SimpleNamespace:
    return SimpleNamespace(**{name: values.get(name, 0) for name in LIMIT_FIELDS})


EVERY_LIMIT = {
    "rate_limit_rpm": 10,
    "rate_limit_tpm": 5000,
    "budget_daily_tokens": 20000,
    "budget_monthly_tokens": 90000,
    "budget_daily_usd_micros": 2_000_000,
    "budget_monthly_usd_micros": 9_000_000,
}


def counters(value: int = 0) -> dict:
    return {
        (tier, period): {limits.REQUESTS: value, limits.TOKENS: value, limits.MICROS: value}
        for tier in limits.TIERS
        for period in limits.PERIODS
    }


def test_checks_run_window_by_window_the_project_before_the_key_dollars_beside_tokens():
    checks = limits.plan(project=spend_limits(**EVERY_LIMIT), key=spend_limits(**EVERY_LIMIT), estimate_tokens=300)
    assert [(check.kind.code, check.tier) for check in checks] == [
        ("budget_monthly", "project"),
        ("budget_monthly_usd", "project"),
        ("budget_monthly", "key"),
        ("budget_monthly_usd", "key"),
        ("budget_daily", "project"),
        ("budget_daily_usd", "project"),
        ("budget_daily", "key"),
        ("budget_daily_usd", "key"),
        ("rate_limit_tpm", "project"),
        ("rate_limit_tpm", "key"),
        ("rate_limit_rpm", "project"),
        ("rate_limit_rpm", "key"),
    ]


def test_only_configured_limits_are_checked():
    checks = limits.plan(project=spend_limits(), key=spend_limits(rate_limit_rpm=3), estimate_tokens=10)
    assert [(check.kind.code, check.tier) for check in checks] == [("rate_limit_rpm", "key")]
    assert limits.plan(project=spend_limits(), key=spend_limits(), estimate_tokens=10) == []


def _denies(check: limits.Check, current: int) -> bool:
    # The rule the counter store runs (gateway.clients.usage): current + addend > threshold.
    return current + check.addend > check.threshold


@pytest.mark.parametrize(
    ("field", "limit", "estimate", "allowed_up_to"),
    [
        # A budget denies once used + reserved reaches it, whatever the call's own size.
        ("budget_daily_tokens", 1000, 400, 999),
        ("budget_monthly_usd_micros", 5_000_000, 400, 4_999_999),
        # Tokens per minute deny when this call's estimate would pass them.
        ("rate_limit_tpm", 1000, 400, 600),
        # Requests per minute: the call takes a slot; the rpm-th slot is the last.
        ("rate_limit_rpm", 10, 400, 9),
    ],
)
def test_each_limit_denies_exactly_past_its_edge(field, limit, estimate, allowed_up_to):
    [check] = limits.plan(project=spend_limits(**{field: limit}), key=spend_limits(), estimate_tokens=estimate)
    assert not _denies(check, allowed_up_to)
    assert _denies(check, allowed_up_to + 1)


def test_retry_after_is_the_ceiling_of_the_seconds_to_the_windows_end_and_at_least_one():
    assert limits.seconds_until_reset(limits.MINUTE, NOW) == 43
    assert limits.seconds_until_reset(limits.DAY, NOW) == 43
    # The year turns with the month.
    assert limits.seconds_until_reset(limits.MONTH, NOW) == 43
    assert limits.seconds_until_reset(limits.MINUTE, NOW.replace(second=59, microsecond=999_999)) == 1
    assert limits.seconds_until_reset(limits.MINUTE, NOW.replace(second=0, microsecond=0)) == 60
    mid_month = datetime(2026, 2, 10, 12, 0, 0, tzinfo=UTC)
    assert limits.seconds_until_reset(limits.MONTH, mid_month) == (18 * 24 + 12) * 3600
    assert limits.window_start(limits.MONTH, mid_month) == datetime(2026, 2, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "tier", "used", "code", "error_type", "message"),
    [
        (
            "rate_limit_rpm",
            "project",
            10,
            "rate_limit_rpm",
            "rate_limit_exceeded",
            "Rate limit reached: 10 requests per minute for this project. Retry after 43 seconds.",
        ),
        (
            "rate_limit_tpm",
            "key",
            900,
            "rate_limit_tpm",
            "rate_limit_exceeded",
            "Rate limit reached: 1000 tokens per minute for this api key. Retry after 43 seconds.",
        ),
        (
            "budget_daily_tokens",
            "project",
            1000,
            "budget_daily",
            "insufficient_quota",
            "Daily token budget exhausted (1000 of 1000 tokens used). Retry after 43 seconds.",
        ),
        (
            "budget_monthly_usd_micros",
            "key",
            1_234_567,
            "budget_monthly_usd",
            "insufficient_quota",
            "Monthly dollar budget exhausted ($1.234567 of $1.00 spent). Retry after 43 seconds.",
        ),
    ],
)
def test_a_denial_names_its_code_type_scope_and_wait(field, tier, used, code, error_type, message):
    limit = {"rate_limit_rpm": 10, "rate_limit_tpm": 1000, "budget_daily_tokens": 1000}.get(field, 1_000_000)
    tiers = {"project": spend_limits(), "key": spend_limits(), tier: spend_limits(**{field: limit})}
    [check] = limits.plan(project=tiers["project"], key=tiers["key"], estimate_tokens=200)
    refusal = limits.denial(check, {check.kind.column: used, "held_tokens": 0, "held_micros": 0}, NOW)
    assert (refusal.code, refusal.error_type, refusal.scope, refusal.retry_after) == (code, error_type, tier, 43)
    assert refusal.message == message


def test_headers_report_every_configured_limit_from_the_counters_after_the_call():
    checks = limits.plan(project=spend_limits(**EVERY_LIMIT), key=spend_limits(), estimate_tokens=300)
    values = counters()
    values["project", limits.MINUTE] = {limits.REQUESTS: 4, limits.TOKENS: 1300, limits.MICROS: 0}
    values["project", limits.DAY] = {limits.REQUESTS: 4, limits.TOKENS: 2500, limits.MICROS: 1_250_000}
    values["project", limits.MONTH] = {limits.REQUESTS: 4, limits.TOKENS: 91000, limits.MICROS: 3_000_001}
    assert limits.limit_headers(checks, values, NOW) == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "6",
        "x-ratelimit-reset-requests": "43",
        "x-ratelimit-limit-tokens": "5000",
        "x-ratelimit-remaining-tokens": "3700",
        "x-ratelimit-reset-tokens": "43",
        "x-ragmux-budget-daily-remaining": "17500",
        "x-ragmux-budget-daily-usd-remaining": "0.75",
        "x-ragmux-budget-monthly-remaining": "0",
        "x-ragmux-budget-monthly-usd-remaining": "5.999999",
    }
    assert set(limits.HEADER_NAMES) >= set(limits.limit_headers(checks, values, NOW))


def test_headers_report_the_tier_with_less_left():
    checks = limits.plan(
        project=spend_limits(rate_limit_rpm=100, budget_daily_tokens=1000),
        key=spend_limits(rate_limit_rpm=5, budget_daily_tokens=50_000),
        estimate_tokens=10,
    )
    values = counters(3)
    values["key", limits.DAY][limits.TOKENS] = 49_990
    headers = limits.limit_headers(checks, values, NOW)
    assert headers["x-ratelimit-limit-requests"] == "5"
    assert headers["x-ratelimit-remaining-requests"] == "2"
    assert headers["x-ragmux-budget-daily-remaining"] == "10"


def test_on_a_denial_the_headers_show_the_denying_tier_with_nothing_left():
    checks = limits.plan(
        project=spend_limits(rate_limit_rpm=3), key=spend_limits(rate_limit_rpm=100), estimate_tokens=10
    )
    project_rpm = checks[0]
    headers = limits.limit_headers(checks, counters(3), NOW, denied=project_rpm)
    assert headers["x-ratelimit-limit-requests"] == "3"
    assert headers["x-ratelimit-remaining-requests"] == "0"
