"""The request log in the dashboard: the JSON API's filters and cursor pages, validated by the
API's own query input, one call in detail, and the CSV export of what is filtered; and the
overview's usage over the last day and week."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.shortcuts import render
from django.utils import timezone

from gateway.clients import selectors
from gateway.clients.models import BILLED_ENDPOINTS, STORE_SEARCHING_ENDPOINTS, Endpoint
from gateway.clients.serializers import RequestLogPageQuery, encode_cursor
from ragmux.core.units import micros_to_dollars
from ragmux.dashboard.access import page
from ragmux.dashboard.filters import dollars
from ragmux.dashboard.forms import Form

FILTERS = ("project", "key", "model", "endpoint", "status", "from", "to")
PAGE_SIZE = 50


@page("viewer")
def request_logs(request):
    form = Form.filters(request, names=FILTERS)
    query = form.filled
    cursor = {"cursor": request.GET["cursor"]} if request.GET.get("cursor") else {}
    data = form.validated(RequestLogPageQuery, {**query, **cursor, "limit": PAGE_SIZE})
    rows, older = [], ""
    if data is not None:
        before_id = data.pop("cursor", None)
        data.pop("limit")
        logs = selectors.request_log_list(**data).select_related("project", "key")
        rows, next_before = selectors.request_log_page(logs, before_id=before_id, limit=PAGE_SIZE)
        if next_before is not None:
            older = "?" + urlencode({**query, "cursor": encode_cursor(next_before)})
    return render(
        request,
        "dashboard/request_logs.html",
        {
            "form": form,
            "rows": [(log, dollars(log.cost_micros)) for log in rows],
            "paged": bool(cursor),
            "older": older,
            "newest": "?" + urlencode(query),
            # The export takes the same filters; it has no pages, so no cursor.
            "csv": "/admin/api/request-logs.csv" + ("?" + urlencode(query) if query else ""),
            "projects": list(selectors.project_list().only("id", "name")),
            "keys": list(selectors.key_choices()),
            "endpoints": Endpoint.values,
        },
        status=400 if form.errors else 200,
    )


@page("viewer")
def request_log_detail(request, log_id: int):
    log = selectors.request_log_get(log_id=log_id)
    return render(
        request,
        "dashboard/request_log.html",
        {
            "log": log,
            "cost": dollars(log.cost_micros),
            "searches_store": log.endpoint in STORE_SEARCHING_ENDPOINTS,
            "billed": log.endpoint in BILLED_ENDPOINTS,
            # A billed call refused before any model ran (a 429, a 400) spent nothing: no block of zeros.
            "spent": log.cost_micros > 0
            or any((log.prompt_tokens, log.completion_tokens, log.embedding_tokens, log.rerank_tokens)),
        },
    )


# --- usage on the overview --------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """One range of the overview: its totals and a point per bucket, empty buckets included."""

    name: str
    label: str
    per: str
    starts: list[datetime]
    requests: list[int]
    tokens: list[int]
    cost_micros: list[int]

    @property
    def total_requests(self) -> int:
        return sum(self.requests)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)

    @property
    def total_cost(self) -> str:
        return dollars(sum(self.cost_micros))

    def chart(self) -> dict:
        """What the overview's script draws: seconds since the epoch, and each series."""
        return {
            "x": [int(start.timestamp()) for start in self.starts],
            "requests": self.requests,
            "tokens": self.tokens,
            "cost": [float(micros_to_dollars(micros)) for micros in self.cost_micros],
        }


# The overview's ranges: name, label, span, and the bucket each point of its charts sums.
RANGES = (("day", "Last 24 hours", timedelta(hours=24), "hour"), ("week", "Last 7 days", timedelta(days=7), "day"))
STEPS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}


def _bucket_start(moment: datetime, bucket: str) -> datetime:
    start = moment.replace(minute=0, second=0, microsecond=0)
    return start.replace(hour=0) if bucket == "day" else start


def usage(now: datetime) -> list[Usage]:
    """Each range counts exactly its span back from ``now``; its first bucket is partial."""
    ranges = []
    for name, label, span, bucket in RANGES:
        since = now - span
        first, step = _bucket_start(since, bucket), STEPS[bucket]
        starts = [first + step * n for n in range(int(span / step) + 1)]
        found = {row["start"]: row for row in selectors.usage_buckets(since=since, bucket=bucket)}
        empty = {"requests": 0, "tokens": 0, "cost_micros": 0}
        points = [found.get(start, empty) for start in starts]
        ranges.append(
            Usage(
                name=name,
                label=label,
                per=bucket,
                starts=starts,
                requests=[p["requests"] for p in points],
                tokens=[p["tokens"] for p in points],
                cost_micros=[p["cost_micros"] for p in points],
            )
        )
    return ranges


def overview_usage() -> dict:
    ranges = usage(timezone.now())
    return {"usage": ranges, "usage_charts": {u.name: u.chart() for u in ranges}}
