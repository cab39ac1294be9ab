"""Reads of spend: a project's or a key's usage against its limits, and the request log's summary.

Both read the request log, the record of every `/v1` call: the usage report counts what the
limits count (a call's prompt, embedding and completion tokens and its priced cost, refused
calls apart, as a 429 spends nothing), in the fixed UTC windows of `usage_windows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Avg, Count, F, FloatField, Q, Sum
from django.db.models.aggregates import Aggregate
from django.db.models.functions import Coalesce, TruncDate

from gateway.clients.models import Endpoint, GatewayKey, Project, RequestLog, SpendLimits
from gateway.clients.usage_windows import (
    DAY,
    FORECAST_RATE_SPAN,
    MINUTE,
    MONTH,
    WINDOWS,
    Window,
    exhausted_at,
    window_at,
)

RATE_LIMITED = 429
ERROR_FROM = 400
RECENT_CALLS = 50

# A window's limits: (requests, tokens, micro-dollars) fields of `SpendLimits`; None is no limit of that kind.
_LIMIT_FIELDS = {
    MINUTE: ("rate_limit_rpm", "rate_limit_tpm", None),
    DAY: (None, "budget_daily_tokens", "budget_daily_usd_micros"),
    MONTH: (None, "budget_monthly_tokens", "budget_monthly_usd_micros"),
}


class _ContinuousPercentile(Aggregate):
    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, *, fraction: float, **extra):
        super().__init__(expression, fraction=fraction, **extra)


@dataclass(frozen=True)
class WindowUsage:
    window: Window
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_micros: int
    rate_limited: int
    request_limit: int
    token_limit: int
    usd_limit_micros: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class UsageReport:
    project_id: int | None
    api_key_id: int | None
    generated_at: datetime
    windows: dict[str, WindowUsage]
    forecast: dict[str, datetime | None]


def _spend_sums(rows_in: Q) -> dict:
    """Aggregates of what the rows matching ``rows_in`` spent, refused calls apart."""
    spent = rows_in & ~Q(status_code=RATE_LIMITED)
    return {
        "requests": Count("id", filter=spent),
        "prompt_tokens": Coalesce(Sum(F("prompt_tokens") + F("embedding_tokens"), filter=spent), 0),
        "completion_tokens": Coalesce(Sum("completion_tokens", filter=spent), 0),
        "cost_micros": Coalesce(Sum("cost_micros", filter=spent), 0),
        "rate_limited": Count("id", filter=rows_in & Q(status_code=RATE_LIMITED)),
    }


def usage_report(*, project: Project, api_key: GatewayKey | None = None, now: datetime) -> UsageReport:
    """The usage of ``project`` (or of its key ``api_key``) in the minute, day and month ``now``
    falls in, against that owner's own limits, with when each budget runs out at the last hour's rate."""
    owner: SpendLimits = api_key if api_key is not None else project
    windows = {name: window_at(name, now) for name in WINDOWS}
    recent_since = now - FORECAST_RATE_SPAN
    rows = RequestLog.objects.filter(project=project)
    if api_key is not None:
        rows = rows.filter(key=api_key)
    aggregates = {}
    for name, window in windows.items():
        for measure, aggregate in _spend_sums(Q(created_at__gte=window.start)).items():
            aggregates[f"{name}_{measure}"] = aggregate
    recent = _spend_sums(Q(created_at__gte=recent_since))
    aggregates["recent_tokens"] = recent["prompt_tokens"] + recent["completion_tokens"]
    aggregates["recent_micros"] = recent["cost_micros"]
    sums = rows.filter(created_at__gte=min(windows[MONTH].start, recent_since), created_at__lte=now).aggregate(
        **aggregates
    )
    usage = {}
    for name, window in windows.items():
        limits = [0 if field is None else getattr(owner, field) for field in _LIMIT_FIELDS[name]]
        usage[name] = WindowUsage(
            window,
            *(sums[f"{name}_{measure}"] for measure in _spend_sums(Q())),
            request_limit=limits[0],
            token_limit=limits[1],
            usd_limit_micros=limits[2],
        )
    forecast = {}
    for prefix, name in (("daily", DAY), ("monthly", MONTH)):
        window_usage = usage[name]
        forecast[f"{prefix}_exhausted_at"] = exhausted_at(
            used=window_usage.tokens,
            limit=window_usage.token_limit,
            recent=sums["recent_tokens"],
            now=now,
            resets_at=window_usage.window.resets_at,
        )
        forecast[f"{prefix}_usd_exhausted_at"] = exhausted_at(
            used=window_usage.cost_micros,
            limit=window_usage.usd_limit_micros,
            recent=sums["recent_micros"],
            now=now,
            resets_at=window_usage.window.resets_at,
        )
    return UsageReport(
        project_id=project.pk if api_key is None else None,
        api_key_id=api_key.pk if api_key is not None else None,
        generated_at=now.replace(microsecond=0),
        windows=usage,
        forecast=forecast,
    )


# The request log's figures of a summary (the reference's definitions): errors are every status
# from 400 (429 and 499 included), retrieval calls those that searched a store.
_USED_RETRIEVAL = Q(endpoint=Endpoint.RETRIEVE) | Q(rag_hits__gt=0)


def _counts() -> dict:
    return {
        "requests": Count("id"),
        "errors": Count("id", filter=Q(status_code__gte=ERROR_FROM)),
        "prompt_tokens": Coalesce(Sum("prompt_tokens"), 0),
        "completion_tokens": Coalesce(Sum("completion_tokens"), 0),
        "cost_micros": Coalesce(Sum("cost_micros"), 0),
    }


def _figures() -> dict:
    return {
        **_counts(),
        "embedding_tokens": Coalesce(Sum("embedding_tokens"), 0),
        "avg_latency_ms": Coalesce(Avg("latency_ms", output_field=FloatField()), 0.0),
        "p95_latency_ms": Coalesce(_ContinuousPercentile("latency_ms", fraction=0.95), 0.0),
        "rag_requests": Count("id", filter=_USED_RETRIEVAL),
        "rate_limited": Count("id", filter=Q(status_code=RATE_LIMITED)),
    }


def _clamped(figures: dict) -> dict:
    # A cost is never negative, so neither is a sum of them; the clamp only keeps a hand-edited
    # row from showing a negative spend.
    figures["cost_micros"] = max(0, figures["cost_micros"])
    if "p95_latency_ms" in figures:
        figures["p95_latency_ms"] = round(figures["p95_latency_ms"])
    return figures


@dataclass(frozen=True)
class UsageSummary:
    window: dict
    total: dict
    daily: list[dict]
    recent: list[RequestLog]
    previous: dict | None
    projects: list[dict] | None


def usage_summary(*, window: timedelta, days: int, compare: bool, by_project: bool, now: datetime) -> UsageSummary:
    """The request log over the ``window`` that ends at ``now`` and over all time; per UTC day for
    the last ``days`` days (only days with calls); the window before (``compare``); and per
    project, busiest first (``by_project``)."""
    logs = RequestLog.objects.filter(created_at__lte=now)
    in_window = logs.filter(created_at__gte=now - window)
    first_day = window_at(DAY, now).start - timedelta(days=days - 1)
    daily = (
        logs.filter(created_at__gte=first_day)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day")
        .annotate(**_counts())
        .order_by("day")
    )
    projects = None
    if by_project:
        projects = list(
            in_window.values("project_id")
            .annotate(name=F("project__name"), **_counts())
            .annotate(
                rate_limited=Count("id", filter=Q(status_code=RATE_LIMITED)),
                rag_requests=Count("id", filter=_USED_RETRIEVAL),
            )
            .order_by("-requests", "project_id")
        )
    previous = None
    if compare:
        previous = _clamped(
            logs.filter(created_at__gte=now - 2 * window, created_at__lt=now - window).aggregate(**_figures())
        )
    return UsageSummary(
        window=_clamped(in_window.aggregate(**_figures())),
        total=_clamped(logs.aggregate(**_figures())),
        daily=[_clamped(day) for day in daily],
        recent=list(logs.order_by("-id")[:RECENT_CALLS]),
        previous=previous,
        projects=None if projects is None else [_clamped(project) for project in projects],
    )
