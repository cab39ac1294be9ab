"""The usage report of a project and of a key, and the request log's summary, in the admin API:
their totals against sums over the request log rows computed here in plain Python, validation
of the summary's query, and who may read them."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from gateway.clients.models import GatewayKey, Project, RequestLog
from tests.factories import GatewayKeyFactory, ProjectFactory, RequestLogFactory
from tests.fixtures import PERSONAS

AGES = [
    timedelta(seconds=1),
    timedelta(minutes=20),
    timedelta(minutes=50),
    timedelta(hours=3),
    timedelta(hours=23),
    timedelta(hours=25),
    timedelta(hours=47),
    timedelta(days=3),
    timedelta(days=12),
    timedelta(days=40),
]
STATUSES = [200, 200, 429, 499, 200, 502, 404, 200]
ENDPOINTS = ["chat", "chat", "retrieve", "embeddings"]


@pytest.fixture
def spend(db, fake_connection):
    """Two projects, two keys on the first and one on the second, and rows of every shape at
    ages from a second to 40 days."""
    projects = [ProjectFactory(name=name, chat_connection=fake_connection) for name in ("alpha", "beta")]
    keys = [GatewayKeyFactory(project=projects[0]), GatewayKeyFactory(project=projects[0])]
    keys.append(GatewayKeyFactory(project=projects[1]))
    now = timezone.now()
    n = 0
    for age in AGES:
        for owner, key in ((0, keys[0]), (0, keys[1]), (0, None), (1, keys[2])):
            status = STATUSES[n % len(STATUSES)]
            refused = status == 429
            RequestLogFactory(
                created_at=now - age,
                project=projects[owner],
                key=key,
                endpoint=ENDPOINTS[n % len(ENDPOINTS)],
                status_code=status,
                prompt_tokens=0 if refused else 100 + 7 * n,
                completion_tokens=0 if refused else 3 * n,
                embedding_tokens=0 if refused else 11 * (n % 3),
                cost_micros=0 if refused else 1000 + 37 * n,
                latency_ms=40 + (n * 97) % 500,
                rag_hits=n % 3 if ENDPOINTS[n % len(ENDPOINTS)] == "chat" else 0,
            )
            n += 1
    return {"projects": projects, "keys": keys}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def window_starts(now: datetime) -> dict[str, datetime]:
    """The windows' starts, worked out here apart from the code under test."""
    return {
        "minute": datetime(now.year, now.month, now.day, now.hour, now.minute, tzinfo=UTC),
        "day": datetime(now.year, now.month, now.day, tzinfo=UTC),
        "month": datetime(now.year, now.month, 1, tzinfo=UTC),
    }


def spent(rows: list[RequestLog], since: datetime) -> dict:
    counted = [row for row in rows if row.created_at >= since and row.status_code != 429]
    prompt = sum(row.prompt_tokens + row.embedding_tokens for row in counted)
    completion = sum(row.completion_tokens for row in counted)
    return {
        "requests": len(counted),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "tokens": prompt + completion,
        "cost_micros": sum(row.cost_micros for row in counted),
        "rate_limited": sum(1 for row in rows if row.created_at >= since and row.status_code == 429),
    }


def set_limits(owner: Project | GatewayKey, **limits) -> None:
    type(owner).objects.filter(pk=owner.pk).update(**limits)


def test_project_report_totals_equal_the_rows_sums(api, spend):
    project = spend["projects"][0]
    set_limits(
        project, rate_limit_rpm=5, rate_limit_tpm=1000, budget_daily_tokens=10**9, budget_monthly_usd_micros=7_500_000
    )
    response = api("viewer").get(f"/admin/api/projects/{project.pk}/usage")
    assert response.status_code == 200, response.text
    body = response.json()
    assert "api_key_id" not in body and body["project_id"] == project.pk
    now = utc(body["generated_at"])
    rows = list(RequestLog.objects.filter(project=project))
    for name, start in window_starts(now).items():
        window = body[name]
        expected = spent(rows, start)
        assert {field: window[field] for field in expected} == expected, name
        assert (utc(window["period_start"]), window["cost_usd"]) == (start, expected["cost_micros"] / 1e6)
    assert (body["minute"]["request_limit"], body["minute"]["token_limit"], body["minute"]["usd_limit"]) == (5, 1000, 0)
    assert (body["day"]["request_limit"], body["day"]["token_limit"], body["day"]["usd_limit"]) == (0, 10**9, 0)
    assert (body["month"]["token_limit"], body["month"]["usd_limit"]) == (0, 7.5)
    month_cost = spent(rows, window_starts(now)["month"])["cost_micros"]
    assert body["month"]["usd_percent"] == round(min(100, 100 * month_cost / 7_500_000), 1)
    assert body["minute"]["token_percent"] == round(min(100, 100 * body["minute"]["tokens"] / 1000), 1)
    assert utc(body["day"]["resets_at"]) == window_starts(now)["day"] + timedelta(days=1)


def test_key_report_counts_the_keys_rows_against_its_own_limits(api, spend):
    api_key = spend["keys"][1]
    set_limits(api_key, budget_daily_tokens=1, budget_daily_usd_micros=10**12)
    set_limits(spend["projects"][0], budget_daily_tokens=10**9)
    body = api("editor").get(f"/admin/api/keys/{api_key.pk}/usage").json()
    assert "project_id" not in body and body["api_key_id"] == api_key.pk
    now = utc(body["generated_at"])
    rows = list(RequestLog.objects.filter(key=api_key))
    for name, start in window_starts(now).items():
        expected = spent(rows, start)
        assert {field: body[name][field] for field in expected} == expected, name
    # The key's one-token budget is spent if the key spent anything today.
    spent_today = spent(rows, window_starts(now)["day"])["tokens"] > 0
    assert body["day"]["token_limit"] == 1
    assert body["forecast"]["daily_exhausted_at"] == (body["generated_at"] if spent_today else None)
    assert body["forecast"]["monthly_exhausted_at"] is None


def test_report_forecasts_token_and_dollar_budgets_at_the_last_hours_rate(api, db, fake_connection):
    """Budgets that run out within the day: projected at the last hour's rate, to the second;
    refused calls spend nothing and do not move it; a month's budget that outlasts the month has none."""
    project = ProjectFactory(chat_connection=fake_connection)
    now = timezone.now()
    seconds_left_today = (window_starts(now)["day"] + timedelta(days=1) - now).total_seconds()
    if seconds_left_today < 120:
        pytest.skip("too close to midnight for a forecast within the day")
    RequestLogFactory(
        created_at=now - timedelta(seconds=2), project=project, prompt_tokens=30, completion_tokens=10, cost_micros=500
    )
    RequestLogFactory(created_at=now - timedelta(seconds=1), project=project, status_code=429)
    # 40 tokens and 500 micro-dollars an hour; room for about a third and a half of the day left.
    token_budget = 40 + max(1, int(40 * seconds_left_today / 3600 / 3))
    usd_budget = 500 + max(1, int(500 * seconds_left_today / 3600 / 2))
    set_limits(
        project,
        budget_daily_tokens=token_budget,
        budget_daily_usd_micros=usd_budget,
        budget_monthly_tokens=40 + 10**12,
    )
    body = api("viewer").get(f"/admin/api/projects/{project.pk}/usage").json()
    generated = utc(body["generated_at"])
    if window_starts(generated)["day"] != window_starts(now)["day"]:
        pytest.skip("the rows were written on the day before the report's")
    assert (body["day"]["tokens"], body["day"]["cost_micros"], body["day"]["rate_limited"]) == (40, 500, 1)
    forecast = body["forecast"]
    assert utc(forecast["daily_exhausted_at"]) == generated + timedelta(
        seconds=math.floor(3600 * (token_budget - 40) / 40)
    )
    assert utc(forecast["daily_usd_exhausted_at"]) == generated + timedelta(
        seconds=math.floor(3600 * (usd_budget - 500) / 500)
    )
    assert (forecast["monthly_exhausted_at"], forecast["monthly_usd_exhausted_at"]) == (None, None)
    assert forecast["daily_exhausted_at"].endswith("Z")


def percentile(values: list[int], fraction: float) -> float:
    """The continuous percentile (PostgreSQL's percentile_cont), interpolating between ranks."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * fraction
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def figures(rows: list[RequestLog]) -> dict:
    latencies = [row.latency_ms for row in rows]
    cost = sum(row.cost_micros for row in rows)
    return {
        "requests": len(rows),
        "errors": sum(1 for row in rows if row.status_code >= 400),
        "prompt_tokens": sum(row.prompt_tokens for row in rows),
        "completion_tokens": sum(row.completion_tokens for row in rows),
        "embedding_tokens": sum(row.embedding_tokens for row in rows),
        "avg_latency_ms": sum(latencies) / len(rows) if rows else 0.0,
        "p95_latency_ms": round(percentile(latencies, 0.95)) if rows else 0,
        "rag_requests": sum(1 for row in rows if row.endpoint == "retrieve" or row.rag_hits > 0),
        "rate_limited": sum(1 for row in rows if row.status_code == 429),
        "cost_micros": cost,
        "cost_usd": cost / 1e6,
    }


DAY_FIELDS = ("requests", "errors", "prompt_tokens", "completion_tokens", "cost_micros", "cost_usd")


def test_summary_totals_equal_the_rows_sums(api, spend):
    response = api("viewer").get(
        "/admin/api/usage/summary", params={"window": "24h", "compare": "1", "days": "7", "by_project": "1"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    now = timezone.now()
    rows = list(RequestLog.objects.all())
    # The rows are an hour or more from the windows' edges, so the moment the summary was made
    # within this test does not matter.
    in_window = [row for row in rows if row.created_at >= now - timedelta(hours=24)]
    previous = [row for row in rows if now - timedelta(hours=48) <= row.created_at < now - timedelta(hours=24)]
    assert body["window"] == pytest.approx(figures(in_window))
    assert body["previous"] == pytest.approx(figures(previous))
    assert body["total"] == pytest.approx(figures(rows))
    assert in_window and previous and len(rows) > len(in_window) + len(previous)
    first_day = now.date() - timedelta(days=6)
    days = sorted({row.created_at.date() for row in rows if row.created_at.date() >= first_day})
    expected_daily = []
    for day in days:
        on_day = figures([row for row in rows if row.created_at.date() == day])
        expected_daily.append({"day": day.isoformat(), **{field: on_day[field] for field in DAY_FIELDS}})
    assert body["daily"] == expected_daily
    expected_projects = []
    for project in spend["projects"]:
        mine = figures([row for row in in_window if row.project_id == project.pk])
        expected_projects.append(
            {
                "project_id": project.pk,
                "name": project.name,
                **{k: mine[k] for k in ("requests", "errors", "prompt_tokens", "completion_tokens")},
                **{k: mine[k] for k in ("rate_limited", "rag_requests", "cost_micros", "cost_usd")},
            }
        )
    expected_projects.sort(key=lambda project: (-project["requests"], project["project_id"]))
    assert body["projects"] == expected_projects
    assert [log["id"] for log in body["recent"]] == sorted((row.id for row in rows), reverse=True)[:50]


def test_summary_leaves_out_what_is_not_asked_for_and_is_zero_when_empty(api, db):
    body = api("viewer").get("/admin/api/usage/summary").json()
    assert set(body) == {"window", "total", "daily", "recent"}
    assert body["window"] == figures([]) and body["daily"] == [] and body["recent"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": "yesterday"}, "window"),
        ({"window": "-5h"}, "window"),
        ({"window": "0s"}, "window"),
        ({"window": "99999999999999999999h"}, "window"),
        ({"window": "9601h"}, "window"),
        ({"window": "24h\x00"}, "window"),
        ({"window": "h" * 33}, "window"),
        ({"days": "0"}, "days"),
        ({"days": "91"}, "days"),
        ({"days": "seven"}, "days"),
        ({"days": "99999999999999999999999"}, "days"),
        ({"compare": "perhaps"}, "compare"),
        ({"by_project": "\x00"}, "by_project"),
        ({"project": "1"}, "project"),
    ],
)
def test_bad_summary_queries_are_a_400_naming_the_parameter(api, db, params, field):
    response = api("viewer").get("/admin/api/usage/summary", params=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error" and field in error["fields"]


def test_every_role_reads_usage_and_no_one_else(api, spend):
    paths = [
        f"/admin/api/projects/{spend['projects'][0].pk}/usage",
        f"/admin/api/keys/{spend['keys'][0].pk}/usage",
        "/admin/api/usage/summary?compare=1&by_project=1",
    ]
    for path in paths:
        for persona in PERSONAS:
            response = api(persona).get(path)
            assert response.status_code == (403 if persona == "outsider" else 200), (path, persona)
        anonymous = api().get(path)
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthenticated"
        assert api("admin").post(path.split("?")[0], json={}).status_code == 405


def test_reports_of_missing_or_revoked_owners_are_404(api, spend):
    admin = api("admin")
    assert admin.get("/admin/api/projects/999999/usage").json()["error"]["message"] == "project not found"
    assert admin.get("/admin/api/keys/999999/usage").json()["error"]["message"] == "key not found"
    revoked = spend["keys"][1]
    assert admin.get(f"/admin/api/keys/{revoked.pk}/usage").status_code == 200
    assert admin.delete(f"/admin/api/keys/{revoked.pk}").status_code == 200
    gone = admin.get(f"/admin/api/keys/{revoked.pk}/usage")
    assert (gone.status_code, gone.json()["error"]["message"]) == (404, "key not found")
