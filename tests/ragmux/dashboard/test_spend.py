"""Spend on the dashboard: the meters of a project's configured limits with their resets and
forecasts in words, the 429s, on the project page (and its self-refreshing section) and the overview."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from gateway.clients.limits import DAY, MINUTE, MONTH
from gateway.clients.models import Project
from gateway.clients.usage_reports import UsageReport, WindowUsage
from gateway.clients.usage_windows import window_at
from ragmux.dashboard.spend import budget_meters, forecast_words, utc_moment
from tests.factories import ProjectFactory, RequestLogFactory
from tests.helpers import text

NOW = datetime(2026, 12, 1, 12, 5, 30, tzinfo=UTC)


def test_moments_are_utc_times_today_and_dates_on_other_days():
    assert utc_moment(datetime(2026, 12, 1, 15, 40, 59, tzinfo=UTC), NOW) == "at 15:40 UTC"
    assert utc_moment(datetime(2026, 12, 2, tzinfo=UTC), NOW) == "on 2026-12-02 at 00:00 UTC"
    assert utc_moment(NOW.astimezone(timezone.get_fixed_timezone(-300)), NOW) == "at 12:05 UTC"


def test_forecasts_in_words():
    at_1540 = datetime(2026, 12, 1, 15, 40, tzinfo=UTC)
    assert forecast_words("daily token budget", at_1540, NOW) == (
        "At this rate the daily token budget runs out at 15:40 UTC."
    )
    assert forecast_words("monthly dollar budget", datetime(2026, 12, 20, 8, 0, tzinfo=UTC), NOW) == (
        "At this rate the monthly dollar budget runs out on 2026-12-20 at 08:00 UTC."
    )
    assert forecast_words("daily token budget", NOW, NOW) == "The daily token budget is spent."
    assert forecast_words("daily token budget", None, NOW) == ""


def usage(name: str, **values) -> WindowUsage:
    figures = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_micros": 0, "rate_limited": 0}
    limits = {"request_limit": 0, "token_limit": 0, "usd_limit_micros": 0}
    return WindowUsage(window_at(name, NOW), **{**figures, **limits, **values})


def test_a_meter_per_configured_limit_longest_window_first():
    report = UsageReport(
        project_id=1,
        api_key_id=None,
        generated_at=NOW,
        windows={
            MINUTE: usage(MINUTE, requests=3, request_limit=3),
            DAY: usage(DAY, prompt_tokens=900, completion_tokens=100, token_limit=4000, cost_micros=1_500_000),
            MONTH: usage(MONTH, cost_micros=2_000_000, usd_limit_micros=10_000_000),
        },
        forecast={
            "daily_exhausted_at": datetime(2026, 12, 1, 15, 40, tzinfo=UTC),
            "monthly_exhausted_at": None,
            "daily_usd_exhausted_at": None,
            "monthly_usd_exhausted_at": None,
        },
    )
    meters = budget_meters(report)
    assert [(m.name, m.text, m.percent, m.full, m.resets_at) for m in meters] == [
        ("monthly dollar budget", "$2.00 of $10.00", 20.0, False, "on 2027-01-01 at 00:00 UTC"),
        ("daily token budget", "1,000 of 4,000 tokens", 25.0, False, "on 2026-12-02 at 00:00 UTC"),
        ("requests-a-minute limit", "3 of 3 requests", 100.0, True, "at 12:06 UTC"),
    ]
    assert [m.forecast for m in meters] == ["", "At this rate the daily token budget runs out at 15:40 UTC.", ""]


@pytest.fixture
def limited(db, fake_connection):
    project = ProjectFactory(name="metered", chat_connection=fake_connection)
    Project.objects.filter(pk=project.pk).update(budget_daily_tokens=10**9, budget_monthly_usd_micros=5_000_000)
    now = timezone.now()
    RequestLogFactory(project=project, created_at=now, prompt_tokens=1200, completion_tokens=34, cost_micros=250_000)
    RequestLogFactory(project=project, created_at=now, status_code=429)
    return Project.objects.get(pk=project.pk)


def test_the_project_page_shows_its_meters_and_refusals(as_role, limited):
    words = text(as_role("viewer").get(f"/admin/projects/{limited.pk}/"))
    assert "Monthly dollar budget $0.25 of $5.00" in words
    assert "Daily token budget 1,234 of 1,000,000,000 tokens" in words
    assert "Calls refused by the limits (429): 1 today, 1 this month." in words
    section = as_role("viewer").get(f"/admin/projects/{limited.pk}/spend", headers={"HX-Request": "true"})
    assert section.status_code == 200
    assert 'id="spend"' in section.content.decode() and "<html" not in section.content.decode()
    assert as_role("outsider").get(f"/admin/projects/{limited.pk}/spend").status_code == 403
    assert as_role("viewer").get("/admin/projects/999999/spend").status_code == 404


def test_a_project_without_limits_says_so(as_role, db, fake_connection):
    project = ProjectFactory(chat_connection=fake_connection)
    words = text(as_role("viewer").get(f"/admin/projects/{project.pk}/"))
    assert "No budget or rate limit is set on the project" in words
    assert "Calls refused by the limits (429): 0 today, 0 this month." in words


def test_the_overview_lists_the_projects_with_limits(as_role, limited, fake_connection):
    ProjectFactory(name="unmetered", chat_connection=fake_connection)
    response = as_role("viewer").get("/admin/")
    assert [spend.project.name for spend in response.context["spends"]] == ["metered"]
    words = text(response)
    assert "Budgets and rate limits metered Monthly dollar budget $0.25 of $5.00" in words
    assert "unmetered" not in words


def test_the_overview_says_when_no_project_has_limits(as_role, db):
    assert "No project has a budget or a rate limit" in text(as_role("viewer").get("/admin/"))


def test_meters_reset_at_the_windows_ends(as_role, limited):
    now = timezone.now()
    words = text(as_role("viewer").get(f"/admin/projects/{limited.pk}/"))
    day_end = window_at(DAY, now).resets_at
    assert f"Resets on {day_end:%Y-%m-%d} at 00:00 UTC." in words
    month_end = window_at(MONTH, now).resets_at
    assert f"Resets on {month_end:%Y-%m-%d} at 00:00 UTC." in words


def test_the_project_page_words_the_forecast(as_role, limited):
    now = timezone.now()
    if window_at(DAY, now).resets_at - now < timedelta(hours=2):
        pytest.skip("too close to midnight for a forecast within the day")
    # 1,234 tokens in the last hour and as many left: an hour from now.
    Project.objects.filter(pk=limited.pk).update(budget_daily_tokens=2 * 1234)
    words = text(as_role("viewer").get(f"/admin/projects/{limited.pk}/"))
    candidates = {f"{now + timedelta(hours=1, seconds=s):%H:%M}" for s in (0, 60)}
    assert any(f"At this rate the daily token budget runs out at {hhmm} UTC." in words for hhmm in candidates), words
    Project.objects.filter(pk=limited.pk).update(budget_daily_tokens=1234)
    assert "The daily token budget is spent." in text(as_role("viewer").get(f"/admin/projects/{limited.pk}/"))
