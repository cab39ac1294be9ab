"""The request log in the admin API: filters, cursor pages, the streamed CSV export with the
same filters, and retention."""

from __future__ import annotations

import csv
import io
import warnings
from datetime import timedelta
from urllib.parse import quote

import httpx
import pytest
from django.utils import timezone

from tests.factories import GatewayKeyFactory, ProjectFactory, RequestLogFactory
from tests.fixtures import PERSONAS

EVIL_MODEL = '=HYPERLINK("http://evil.example/x","click")'
BASE_TIME = timezone.now().replace(microsecond=0) - timedelta(days=10)


@pytest.fixture
def ledger(db, fake_connection):
    """Two projects with a key each and 40 rows over 40 hours, of varied shapes."""
    projects = [ProjectFactory(name=name, chat_connection=fake_connection) for name in ("alpha", "beta")]
    keys = [GatewayKeyFactory(project=project, name=f"{project.name}-key") for project in projects]
    statuses = [200, 200, 404, 429, 500, 502, 200, 400]
    endpoints = ["chat", "chat", "retrieve", "embeddings", "models"]
    models = ["gpt-4o-mini", "claude-sonnet-4-5", EVIL_MODEL, "-2+3", "@SUM(A1)"]
    rows = []
    for n in range(40):
        owner = n % 2
        rows.append(
            RequestLogFactory(
                created_at=BASE_TIME + timedelta(hours=n),
                project=projects[owner],
                key=keys[owner],
                endpoint=endpoints[n % len(endpoints)],
                model=models[n % len(models)],
                status_code=statuses[n % len(statuses)],
                prompt_tokens=n * 10,
                completion_tokens=n,
                cached_prompt_tokens=n * 3,
                cache_write_tokens=n * 2,
                tokens_estimated=n % 3 == 0,
                cost_micros=n * 100,
                latency_ms=50 + n,
                ttfb_ms=None if n % 4 else 20,
                streamed=n % 2 == 0,
                error="=cmd|' /C calc'!A0" if n == 7 else "",
            )
        )
    return {"projects": projects, "keys": keys, "rows": rows}


def listed_ids(client: httpx.Client, params: dict, limit: int = 7) -> list[int]:
    """Every id the API lists for ``params``, following the cursor page by page."""
    ids: list[int] = []
    cursor = None
    while True:
        page_params = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        response = client.get("/admin/api/request-logs", params=page_params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body["data"]) <= limit
        ids.extend(row["id"] for row in body["data"])
        cursor = body["next"]
        if cursor is None:
            return ids


def csv_rows(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"].startswith('attachment; filename="ragmux-request-logs-')
    return list(csv.DictReader(io.StringIO(response.text)))


def test_pages_hold_every_row_once_newest_first(api, ledger):
    ids = listed_ids(api("viewer"), {})
    assert ids == sorted((row.id for row in ledger["rows"]), reverse=True)
    first = api("viewer").get("/admin/api/request-logs").json()
    assert first["next"] is None and len(first["data"]) == 40  # the default page is 100


def test_a_row_has_every_ledger_column(api, ledger):
    from gateway.clients.serializers import REQUEST_LOG_COLUMNS

    row = ledger["rows"][4]
    [listed] = (
        api("viewer")
        .get(
            "/admin/api/request-logs",
            params={"limit": 1, "to": _iso(row.created_at + timedelta(minutes=1)), "from": _iso(row.created_at)},
        )
        .json()["data"]
    )
    assert tuple(listed) == REQUEST_LOG_COLUMNS
    assert (listed["id"], listed["project_id"], listed["key_id"], listed["model"]) == (
        row.id,
        row.project_id,
        row.key_id,
        row.model,
    )
    assert (listed["cached_prompt_tokens"], listed["cache_write_tokens"]) == (12, 8)


def _iso(moment) -> str:
    return moment.isoformat()


def expected(ledger, predicate) -> list[int]:
    return sorted((row.id for row in ledger["rows"] if predicate(row)), reverse=True)


FILTERS = {
    "project": (lambda lg: {"project": lg["projects"][1].pk}, lambda lg, r: r.project_id == lg["projects"][1].pk),
    "key": (lambda lg: {"key": lg["keys"][0].pk}, lambda lg, r: r.key_id == lg["keys"][0].pk),
    "model": (lambda lg: {"model": EVIL_MODEL}, lambda lg, r: r.model == EVIL_MODEL),
    "endpoint": (lambda lg: {"endpoint": "retrieve"}, lambda lg, r: r.endpoint == "retrieve"),
    "exact status": (lambda lg: {"status": "404"}, lambda lg, r: r.status_code == 404),
    "4xx": (lambda lg: {"status": "4xx"}, lambda lg, r: 400 <= r.status_code < 500),
    "5xx": (lambda lg: {"status": "5xx"}, lambda lg, r: r.status_code >= 500),
    "time range": (
        lambda lg: {"from": _iso(BASE_TIME + timedelta(hours=5)), "to": _iso(BASE_TIME + timedelta(hours=17))},
        lambda lg, r: BASE_TIME + timedelta(hours=5) <= r.created_at < BASE_TIME + timedelta(hours=17),
    ),
    "combined": (
        lambda lg: {
            "project": lg["projects"][0].pk,
            "status": "2xx",
            "from": _iso(BASE_TIME + timedelta(hours=3)),
            "to": (BASE_TIME + timedelta(hours=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        lambda lg, r: (
            r.project_id == lg["projects"][0].pk
            and r.status_code < 300
            and BASE_TIME + timedelta(hours=3) <= r.created_at < BASE_TIME + timedelta(hours=30)
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filters_select_exactly_their_rows_in_the_api_and_the_csv(api, ledger, name):
    params_of, predicate = FILTERS[name]
    params = params_of(ledger)
    want = expected(ledger, lambda row: predicate(ledger, row))
    assert want, "the filter should select something"
    viewer = api("viewer")
    assert listed_ids(viewer, params, limit=3) == want
    rows = csv_rows(viewer.get("/admin/api/request-logs.csv", params=params))
    assert [int(row["id"]) for row in rows] == want


def test_the_csv_has_every_column_and_neutralises_formulas(api, ledger):
    from gateway.clients.serializers import REQUEST_LOG_COLUMNS
    from ragmux.core.units import micros_to_dollars

    response = api("viewer").get("/admin/api/request-logs.csv", headers={"Accept": "text/csv"})
    rows = csv_rows(response)
    # The JSON API's columns, then the CSV's own: the names beside the ids, and dollars.
    assert response.text.splitlines()[0] == ",".join((*REQUEST_LOG_COLUMNS, "project_name", "key_name", "cost_usd"))
    assert len(rows) == 40
    by_id = {int(row["id"]): row for row in rows}
    evil = next(r for r in ledger["rows"] if r.model == EVIL_MODEL)
    assert by_id[evil.id]["model"] == "'" + EVIL_MODEL
    assert {by_id[r.id]["model"] for r in ledger["rows"] if r.model in ("-2+3", "@SUM(A1)")} == {"'-2+3", "'@SUM(A1)"}
    assert by_id[ledger["rows"][7].id]["error"] == "'=cmd|' /C calc'!A0"
    plain = ledger["rows"][0]
    listed = api("viewer").get("/admin/api/request-logs", params={"to": _iso(plain.created_at + timedelta(seconds=1))})
    [as_json] = listed.json()["data"]
    as_csv = by_id[plain.id]
    assert as_csv["created_at"] == as_json["created_at"]
    assert (as_csv["tokens_estimated"], as_csv["streamed"], as_csv["ttfb_ms"]) == ("true", "true", "20")
    assert by_id[ledger["rows"][1].id]["ttfb_ms"] == ""  # null is an empty cell
    assert (as_csv["project_name"], as_csv["cost_usd"]) == (
        plain.project.name,
        str(micros_to_dollars(plain.cost_micros)),
    )
    # New columns come last, so a reader by position keeps working.
    assert list(as_csv)[-13:-3] == [
        "cached_prompt_tokens",
        "cache_write_tokens",
        "route_name",
        "target",
        "attempts",
        "rerank_tokens",
        "rerank_outcome",
        "rerank_reason",
        "query_rewrite_tokens",
        "query_rewrite_reason",
    ]
    assert (by_id[ledger["rows"][5].id]["cached_prompt_tokens"], by_id[ledger["rows"][5].id]["cache_write_tokens"]) == (
        "15",
        "10",
    )


def test_the_csv_streams_under_asgi(asgi_url, transactional_db, ledger, personas):
    """Production serves the admin API under uvicorn: the export must stream there too."""
    from ragmux.core.authentication import issue_admin_token

    token = issue_admin_token(user=personas["viewer"])
    params = {"status": "5xx"}
    with (
        warnings.catch_warnings(record=True) as caught,
        httpx.Client(base_url=asgi_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client,
    ):
        warnings.simplefilter("always")
        with client.stream("GET", "/admin/api/request-logs.csv", params=params) as response:
            assert "content-length" not in response.headers
            response.read()
        rows = csv_rows(response)
    # Django warns when it has to read a synchronous iterator whole before sending it.
    assert not [w for w in caught if "StreamingHttpResponse" in str(w.message)]
    assert [int(row["id"]) for row in rows] == expected(ledger, lambda row: row.status_code >= 500)


def test_a_cursor_keeps_its_place_when_new_rows_arrive(api, ledger):
    viewer = api("viewer")
    first = viewer.get("/admin/api/request-logs", params={"limit": 10}).json()
    RequestLogFactory(project=ledger["projects"][0])
    second = viewer.get("/admin/api/request-logs", params={"limit": 10, "cursor": first["next"]}).json()
    assert second["data"][0]["id"] == first["data"][-1]["id"] - 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-13-45T00:00:00Z"}, "to"),
        ({"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "to"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": quote("YmVmb3JlOi0x")}, "cursor"),  # "before:-1"
        ({"cursor": "YmVmb3JlOjk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5"}, "cursor"),  # beyond bigint
        ({"status": "6xx"}, "status"),
        ({"status": "40"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"project": "-1"}, "project"),
        ({"endpoint": "search"}, "endpoint"),
        ({"model": "bad\x00model"}, "model"),
        ({"model": "m" * 129}, "model"),
        ({"since": "2026-01-01"}, "since"),
    ],
)
def test_bad_filters_are_a_400_naming_the_parameter(api, ledger, params, field):
    for path in ("/admin/api/request-logs", "/admin/api/request-logs.csv"):
        if path.endswith(".csv") and field in ("cursor", "limit"):
            continue  # the export has neither: it is every row
        response = api("viewer").get(path, params=params)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert error["code"] == "validation_error" and field in error["fields"]


@pytest.mark.parametrize("path", ["/admin/api/request-logs", "/admin/api/request-logs.csv"])
def test_every_role_reads_the_request_log_and_no_one_else(api, ledger, path):
    for persona in PERSONAS:
        response = api(persona).get(path)
        assert response.status_code == (403 if persona == "outsider" else 200), persona
    anonymous = api().get(path)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthenticated"


def test_retention_purges_old_rows_in_batches(ledger, settings):
    from gateway.clients.models import RequestLog
    from gateway.clients.services import request_log_purge
    from gateway.clients.tasks import purge_request_logs

    now = timezone.now()
    rows = ledger["rows"]
    # 25 rows 100 days old, 15 rows 80 days old.
    RequestLog.objects.filter(pk__in=[r.pk for r in rows[:25]]).update(created_at=now - timedelta(days=100))
    RequestLog.objects.filter(pk__in=[r.pk for r in rows[25:]]).update(created_at=now - timedelta(days=80))
    assert request_log_purge(retention_days=0) == 0  # 0 keeps everything
    assert request_log_purge(retention_days=90, batch_size=4) == 25
    assert sorted(RequestLog.objects.values_list("pk", flat=True)) == [r.pk for r in rows[25:]]
    settings.LOG_RETENTION_DAYS = 60
    purge_request_logs()
    assert not RequestLog.objects.exists()


def test_the_purge_is_scheduled():
    from django.conf import settings

    from ragmux.celery import app

    [entry] = [e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "gateway.purge_request_logs"]
    assert entry["schedule"] > 0
    app.loader.import_default_modules()
    assert "gateway.purge_request_logs" in app.tasks
