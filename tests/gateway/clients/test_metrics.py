"""The budget gauges `/metrics` reads from the database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from gateway.clients.limits import DAY, MONTH, PROJECT, window_start
from gateway.clients.models import UsageCounter
from tests.factories import ProjectFactory
from tests.ragmux.core.test_metrics import metric_lines

pytestmark = pytest.mark.usefixtures("metrics_on")


def _counter(project, period: str, *, start=None, **spent) -> None:
    start = start or window_start(period, timezone.now())
    UsageCounter.objects.create(tier=PROJECT, owner_id=project.pk, period=period, period_start=start, **spent)


def test_each_configured_project_budget_is_a_ratio_of_its_current_window(api):
    capped = ProjectFactory(name="capped", budget_daily_tokens=1000, budget_monthly_usd_micros=4_000_000)
    ProjectFactory(name="unlimited")
    _counter(capped, DAY, prompt_tokens=200, completion_tokens=50, cost_micros=10, reserved_tokens=500)
    _counter(capped, MONTH, prompt_tokens=9, cost_micros=1_000_000)
    # Yesterday's spending is not today's.
    _counter(capped, DAY, start=window_start(DAY, timezone.now()) - timedelta(days=1), prompt_tokens=999)

    gauges = sorted(line for line in metric_lines(api()) if line.startswith("ragmux_budget_used_ratio"))

    assert gauges == [
        'ragmux_budget_used_ratio{project="capped",unit="tokens",window="daily"} 0.25',
        'ragmux_budget_used_ratio{project="capped",unit="usd",window="monthly"} 0.25',
    ]


def test_a_budget_without_spending_in_its_window_reads_zero(api):
    ProjectFactory(name="fresh", budget_monthly_tokens=10)
    assert 'ragmux_budget_used_ratio{project="fresh",unit="tokens",window="monthly"} 0.0' in metric_lines(api())
