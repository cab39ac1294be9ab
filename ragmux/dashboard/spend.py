"""Spend on the dashboard: a meter per configured limit of a project, when its window resets and
when, at the last hour's rate, its budget runs out, with the calls the limits refused. The
figures are the admin API's usage report (`gateway.clients.usage_reports`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.shortcuts import render
from django.utils import timezone

from gateway.clients import selectors
from gateway.clients.limits import DAY, MINUTE, MONTH
from gateway.clients.models import Project
from gateway.clients.usage_reports import UsageReport, WindowUsage, project_usage_reports, usage_report
from gateway.clients.usage_windows import percent_of
from ragmux.dashboard.access import page
from ragmux.dashboard.filters import dollars, number

# Each meter: window, what it measures, its name in sentences, and the forecast that goes with it.
_METERS = (
    (MONTH, "tokens", "monthly token budget", "monthly_exhausted_at"),
    (MONTH, "dollars", "monthly dollar budget", "monthly_usd_exhausted_at"),
    (DAY, "tokens", "daily token budget", "daily_exhausted_at"),
    (DAY, "dollars", "daily dollar budget", "daily_usd_exhausted_at"),
    (MINUTE, "tokens", "tokens-a-minute limit", None),
    (MINUTE, "requests", "requests-a-minute limit", None),
)


# A meter's colour: green up to 80 % of its limit, amber up to 95 %, red above, a spent limit
# included (the <meter>'s optimum is 0, so above its high boundary is the bad region; a value
# equal to the boundary is still amber, so the boundary sits below the limit).
METER_WARN = 0.8
METER_FULL = 0.95


class MeterBounds:
    """The <meter> boundaries of a meter with a ``limit``: amber above ``warn_at``, red above
    ``full_at``."""

    limit: int

    @property
    def warn_at(self) -> float:
        return self.limit * METER_WARN

    @property
    def full_at(self) -> float:
        return self.limit * METER_FULL


def utc_moment(moment: datetime, now: datetime) -> str:
    """``at 15:40 UTC`` on ``now``'s day, ``on 2026-12-02 at 00:00 UTC`` on any other."""
    moment, now = moment.astimezone(UTC), now.astimezone(UTC)
    if moment.date() == now.date():
        return f"at {moment:%H:%M} UTC"
    return f"on {moment:%Y-%m-%d} at {moment:%H:%M} UTC"


def forecast_words(name: str, exhausted_at: datetime | None, now: datetime) -> str:
    """The forecast of a budget in words; empty when it does not run out before its reset."""
    if exhausted_at is None:
        return ""
    if exhausted_at <= now:
        return f"The {name} is spent."
    return f"At this rate the {name} runs out {utc_moment(exhausted_at, now)}."


@dataclass(frozen=True)
class BudgetMeter(MeterBounds):
    name: str
    used: int
    limit: int
    unit: str
    resets_at: str
    forecast: str

    @property
    def percent(self) -> float:
        return percent_of(self.used, self.limit)

    @property
    def full(self) -> bool:
        return self.used >= self.limit

    def _amount(self, value: int) -> str:
        return dollars(value) if self.unit == "dollars" else number(value)

    @property
    def text(self) -> str:
        unit = "" if self.unit == "dollars" else f" {self.unit}"
        return f"{self._amount(self.used)} of {self._amount(self.limit)}{unit}"


def _used_and_limit(usage: WindowUsage, unit: str) -> tuple[int, int]:
    if unit == "dollars":
        return usage.cost_micros, usage.usd_limit_micros
    if unit == "requests":
        return usage.requests, usage.request_limit
    return usage.tokens, usage.token_limit


def budget_meters(report: UsageReport) -> list[BudgetMeter]:
    """A meter for each limit the report's owner has, longest window first."""
    meters = []
    for window, unit, name, forecast_key in _METERS:
        usage = report.windows[window]
        used, limit = _used_and_limit(usage, unit)
        if not limit:
            continue
        exhausted_at = report.forecast[forecast_key] if forecast_key else None
        if window == MONTH and _day_blocks(report):
            # No call gets through until the day resets: the month's rate says nothing.
            exhausted_at = None
        meters.append(
            BudgetMeter(
                name=name,
                used=used,
                limit=limit,
                unit=unit,
                resets_at=utc_moment(usage.window.resets_at, report.generated_at),
                forecast=forecast_words(name, exhausted_at, report.generated_at),
            )
        )
    return meters


def _day_blocks(report: UsageReport) -> bool:
    """True while a daily budget is spent, so the limits refuse every call until it resets."""
    day = report.windows[DAY]
    return any(limit and used >= limit for used, limit in (_used_and_limit(day, u) for u in ("tokens", "dollars")))


@dataclass(frozen=True)
class ProjectSpend:
    project: Project
    meters: list[BudgetMeter]
    refused_today: int
    refused_this_month: int


def _spend(project: Project, report: UsageReport) -> ProjectSpend:
    return ProjectSpend(
        project=project,
        meters=budget_meters(report),
        refused_today=report.windows[DAY].rate_limited,
        refused_this_month=report.windows[MONTH].rate_limited,
    )


def project_spend(project: Project) -> ProjectSpend:
    return _spend(project, usage_report(project=project, now=timezone.now()))


def overview_spend() -> list[ProjectSpend]:
    """The projects that have a limit or had a call refused this month."""
    projects = list(selectors.project_list())
    reports = project_usage_reports(projects=projects, now=timezone.now())
    spends = (_spend(project, report) for project, report in zip(projects, reports, strict=True))
    return [spend for spend in spends if spend.meters or spend.refused_this_month]


@page("viewer")
def project_spend_section(request, project_id: int):
    """The project page's spend section, which refreshes itself."""
    project = selectors.project_get(project_id=project_id)
    return render(request, "dashboard/_spend.html", {"spend": project_spend(project)})
