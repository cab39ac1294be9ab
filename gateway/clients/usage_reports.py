"""Reads of spend: a project's or a key's usage against its limits, and the request log's summary.

Both read the request log, the record of every `/v1` call: the usage report counts what the
limits count (a call's prompt, embedding and completion tokens and its priced cost, refused
calls apart, as a 429 spends nothing), in the fixed UTC windows of `usage_windows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Avg, Count, F, FloatField, Q, QuerySet, Sum
from django.db.models.aggregates import Aggregate
from django.db.models.functions import Coalesce, TruncDate

from gateway.clients.limits import DAY, MINUTE, MONTH, PERIODS
from gateway.clients.models import Endpoint, GatewayKey, Project, RequestLog, SpendLimits
from gateway.clients.usage_windows import FORECAST_RATE_SPAN, Window, exhausted_at, window_at

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
    """PostgreSQL's percentile_cont; ``fraction`` is a constant of this module, never input."""

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


SPEND_MEASURES = ("requests", "prompt_tokens", "completion_tokens", "cost_micros", "rate_limited")


def _spend_sums(rows_in: Q) -> dict:
    """Aggregates of what the rows matching ``rows_in`` spent, refused calls apart."""
    spent = rows_in & ~Q(status_code=RATE_LIMITED)
    return {
        "requests": Count("id", filter=spent),
        # As the limits count them (gateway.clients.ledger settles a call's tokens so).
        "prompt_tokens": Coalesce(
            Sum(F("prompt_tokens") + F("embedding_tokens") + F("rerank_tokens"), filter=spent), 0
        ),
        "completion_tokens": Coalesce(Sum("completion_tokens", filter=spent), 0),
        "cost_micros": Coalesce(Sum("cost_micros", filter=spent), 0),
        "rate_limited": Count("id", filter=rows_in & Q(status_code=RATE_LIMITED)),
    }


def _sums_by_owner(rows: QuerySet[RequestLog], owner_column: str, windows: dict[str, Window], now: datetime) -> dict:
    """Per owner (``owner_column``'s value), each window's spend and the last hour's: one query."""
    recent_since = now - FORECAST_RATE_SPAN
    aggregates = {}
    for name, window in windows.items():
        for measure, aggregate in _spend_sums(Q(created_at__gte=window.start)).items():
            aggregates[f"{name}_{measure}"] = aggregate
    recent = _spend_sums(Q(created_at__gte=recent_since))
    aggregates["recent_tokens"] = recent["prompt_tokens"] + recent["completion_tokens"]
    aggregates["recent_micros"] = recent["cost_micros"]
    grouped = (
        rows.filter(created_at__gte=min(windows[MONTH].start, recent_since), created_at__lte=now)
        .order_by()
        .values(owner_column)
        .annotate(**aggregates)
    )
    return {row[owner_column]: row for row in grouped}


def _report(owner: SpendLimits, sums: dict | None, windows: dict[str, Window], now: datetime) -> UsageReport:
    usage = {}
    for name, window in windows.items():
        limits = [0 if field is None else getattr(owner, field) for field in _LIMIT_FIELDS[name]]
        measures = {measure: 0 if sums is None else sums[f"{name}_{measure}"] for measure in SPEND_MEASURES}
        usage[name] = WindowUsage(
            window, **measures, request_limit=limits[0], token_limit=limits[1], usd_limit_micros=limits[2]
        )
    recent_tokens, recent_micros = (0, 0) if sums is None else (sums["recent_tokens"], sums["recent_micros"])
    forecast = {}
    for prefix, name in (("daily", DAY), ("monthly", MONTH)):
        window_usage = usage[name]
        resets_at = window_usage.window.resets_at
        forecast[f"{prefix}_exhausted_at"] = exhausted_at(
            used=window_usage.tokens, limit=window_usage.token_limit, recent=recent_tokens, now=now, resets_at=resets_at
        )
        forecast[f"{prefix}_usd_exhausted_at"] = exhausted_at(
            used=window_usage.cost_micros,
            limit=window_usage.usd_limit_micros,
            recent=recent_micros,
            now=now,
            resets_at=resets_at,
        )
    is_key = isinstance(owner, GatewayKey)
    return UsageReport(
        project_id=None if is_key else owner.pk,
        api_key_id=owner.pk if is_key else None,
        generated_at=now.replace(microsecond=0),
        windows=usage,
        forecast=forecast,
    )


def usage_report(*, project: Project, api_key: GatewayKey | None = None, now: datetime) -> UsageReport:
    """The usage of ``project`` (or of its key ``api_key``) in the minute, day and month ``now``
    falls in, against that owner's own limits, with when each budget runs out at the last hour's rate."""
    windows = {name: window_at(name, now) for name in PERIODS}
    rows = RequestLog.objects.filter(project=project)
    if api_key is None:
        return _report(project, _sums_by_owner(rows, "project_id", windows, now).get(project.pk), windows, now)
    sums = _sums_by_owner(rows.filter(key=api_key), "key_id", windows, now).get(api_key.pk)
    return _report(api_key, sums, windows, now)


def project_usage_reports(*, projects: list[Project], now: datetime) -> list[UsageReport]:
    """`usage_report` of each of ``projects``, in one query whatever their number."""
    windows = {name: window_at(name, now) for name in PERIODS}
    sums = _sums_by_owner(RequestLog.objects.filter(project__in=projects), "project_id", windows, now)
    return [_report(project, sums.get(project.pk), windows, now) for project in projects]


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
