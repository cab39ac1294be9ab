"""Every admin API endpoint meets hostile input: wrong types, huge integers, NUL bytes, oversized
strings and bodies, unknown and missing fields. Each answer is below 500, and every refusal is a
4xx in the one envelope.

The table is checked against the URLconf: an endpoint (route and method) added without a row
fails `test_every_endpoint_has_a_row`, so new endpoints must join it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from tests.helpers import api_routes, served_methods

ROUTES = api_routes()

HUGE = 10**30
OVERSIZED_TEXT = "x" * 200_000
NUL_TEXT = "bad\x00text"


@dataclass(frozen=True)
class Json:
    """A JSON body: a valid example, and whether an empty object may be valid too."""

    example: dict
    empty_is_valid: bool = False
    # Free-text fields whose limit is the body's size, not a field length.
    long_text: tuple[str, ...] = ()


@dataclass(frozen=True)
class Query:
    """Query-string parameters: a valid example."""

    example: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Multipart:
    pass


@dataclass(frozen=True)
class NoInput:
    pass


def table(ids: dict) -> dict[tuple[str, str], object]:
    connection = {"name": "other", "provider_type": "custom_openai", "base_url": ids["url"], "model_name": "m"}
    price = {"provider_type": "openai", "model": "gpt-hostile", "input_per_mtok": 1, "output_per_mtok": 2}
    store = {"name": "kb2", "embedding_connection_id": ids["connection"], "chunk_size": 500}
    project = {"name": "app", "chat_connection_id": ids["connection"], "system_prompt": "Be brief."}
    # `model` is left out: any short text, digits too, is a model name one may filter by.
    log_filters = {
        "project": 1,
        "key": 1,
        "endpoint": "chat",
        "status": "4xx",
        "from": "2026-01-01T00:00:00Z",
        "to": "2026-02-01T00:00:00+01:00",
    }
    return {
        ("admin/api/login", "post"): Json({"username": "admin", "password": "correct horse battery", "bearer": True}),
        ("admin/api/logout", "post"): NoInput(),
        ("admin/api/me", "get"): NoInput(),
        ("admin/api/me/password", "post"): Json(
            {"current_password": "correct horse battery", "new_password": "a brand new password"}
        ),
        ("admin/api/users", "get"): NoInput(),
        ("admin/api/users", "post"): Json({"username": "newbie", "role": "viewer", "password": "a long password"}),
        ("admin/api/users/<id:user_id>", "get"): NoInput(),
        ("admin/api/users/<id:user_id>", "patch"): Json({"role": "viewer", "is_active": True}, empty_is_valid=True),
        ("admin/api/users/<id:user_id>", "delete"): NoInput(),
        ("admin/api/users/<id:user_id>/password", "post"): Json({"password": "a long password"}, empty_is_valid=True),
        ("admin/api/audit", "get"): Query(
            {"object_type": "store", "object_id": 1, "since": "2026-01-01T00:00:00Z", "page": 1}
        ),
        ("admin/api/models", "get"): NoInput(),
        ("admin/api/models", "post"): Json(connection),
        ("admin/api/models/<id:connection_id>", "get"): NoInput(),
        ("admin/api/models/<id:connection_id>", "put"): Json(connection),
        ("admin/api/models/<id:connection_id>", "delete"): NoInput(),
        ("admin/api/models/<id:connection_id>/test", "post"): Json({"mode": "chat"}, empty_is_valid=True),
        ("admin/api/model-prices", "get"): Query({"provider_type": "openai"}),
        ("admin/api/model-prices", "post"): Json(price),
        ("admin/api/model-prices/<id:price_id>", "get"): NoInput(),
        ("admin/api/model-prices/<id:price_id>", "put"): Json(
            {"input_per_mtok": 3, "output_per_mtok": 4}, empty_is_valid=True
        ),
        ("admin/api/model-prices/<id:price_id>", "delete"): NoInput(),
        ("admin/api/rag-stores", "get"): NoInput(),
        ("admin/api/rag-stores", "post"): Json(store),
        ("admin/api/rag-stores/<id:store_id>", "get"): NoInput(),
        ("admin/api/rag-stores/<id:store_id>", "put"): Json(store),
        ("admin/api/rag-stores/<id:store_id>", "patch"): Json({"top_k": 7}, empty_is_valid=True),
        ("admin/api/rag-stores/<id:store_id>", "delete"): NoInput(),
        ("admin/api/rag-stores/<id:store_id>/documents", "get"): Query({"status": "ready", "page": 1}),
        ("admin/api/rag-stores/<id:store_id>/documents", "post"): Multipart(),
        ("admin/api/rag-stores/<id:store_id>/documents/text", "post"): Json(
            {"title": "t", "content": "words"}, long_text=("content",)
        ),
        ("admin/api/rag-stores/<id:store_id>/reprocess", "post"): Json({"status": "failed"}, empty_is_valid=True),
        ("admin/api/rag-stores/<id:store_id>/search", "post"): Json({"query": "words", "top_k": 3}),
        ("admin/api/documents/<id:document_id>", "get"): NoInput(),
        ("admin/api/documents/<id:document_id>", "delete"): NoInput(),
        ("admin/api/documents/<id:document_id>/download", "get"): NoInput(),
        ("admin/api/documents/<id:document_id>/reprocess", "post"): NoInput(),
        ("admin/api/search-backends", "get"): NoInput(),
        ("admin/api/text-search-configs", "get"): NoInput(),
        ("admin/api/projects", "get"): NoInput(),
        ("admin/api/projects", "post"): Json(project),
        ("admin/api/projects/<id:project_id>", "get"): NoInput(),
        ("admin/api/projects/<id:project_id>", "put"): Json(project),
        ("admin/api/projects/<id:project_id>", "patch"): Json(
            {"rate_limit_rpm": 60, "budget_daily_usd": 2.5}, empty_is_valid=True
        ),
        ("admin/api/projects/<id:project_id>", "delete"): NoInput(),
        ("admin/api/projects/<id:project_id>/keys", "get"): NoInput(),
        ("admin/api/projects/<id:project_id>/keys", "post"): Json({"name": "k", "scopes": ["chat"]}),
        ("admin/api/projects/<id:project_id>/logs", "get"): NoInput(),
        ("admin/api/projects/<id:project_id>/usage", "get"): NoInput(),
        ("admin/api/keys/<id:key_id>", "patch"): Json(
            {"name": "k2", "scopes": ["chat"], "budget_monthly_tokens": 1000}, empty_is_valid=True
        ),
        ("admin/api/keys/<id:key_id>", "delete"): NoInput(),
        ("admin/api/keys/<id:key_id>/rotate", "post"): NoInput(),
        ("admin/api/keys/<id:key_id>/usage", "get"): NoInput(),
        ("admin/api/usage/summary", "get"): Query({"window": "168h", "days": 7, "compare": 1, "by_project": 1}),
        ("admin/api/request-logs", "get"): Query({**log_filters, "cursor": "YmVmb3JlOjEwMA", "limit": 10}),
        ("admin/api/request-logs.csv", "get"): Query(log_filters),
    }


def test_every_endpoint_has_a_row():
    served = {(route, method) for route, view in ROUTES for method in served_methods(view)}
    rows = set(table({"url": "", "connection": 0}))
    assert served - rows == set(), "endpoints without a hostile-input row"
    assert rows - served == set(), "rows for endpoints that no longer exist"


def wrong_type(value):
    if isinstance(value, bool):
        return "maybe"
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, str):
        return 12345
    return "not an object"


def json_rows(spec: Json) -> list[tuple[str, object, bool]]:
    """(label, body, must_refuse) for a JSON endpoint."""
    rows: list[tuple[str, object, bool]] = [
        ("unknown field", {**spec.example, "no_such_field": 1}, True),
        ("array body", [spec.example], True),
        ("scalar body", 7, True),
        ("missing fields", {}, not spec.empty_is_valid),
        ("oversized body", {**spec.example, "padding": "x" * (12 * 1024 * 1024)}, True),
    ]
    for name, value in spec.example.items():
        rows.append((f"{name}: wrong type", {**spec.example, name: wrong_type(value)}, True))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append((f"{name}: huge number", {**spec.example, name: HUGE}, True))
            rows.append((f"{name}: negative huge number", {**spec.example, name: -HUGE}, True))
        if isinstance(value, str):
            rows.append((f"{name}: NUL byte", {**spec.example, name: NUL_TEXT}, True))
            rows.append((f"{name}: oversized", {**spec.example, name: OVERSIZED_TEXT}, name not in spec.long_text))
    return rows


@pytest.fixture
def objects(db, fake_connection, fake_upstream, personas):
    from gateway.clients.services import key_create, project_create
    from gateway.connections.models import ModelPrice
    from ingestion.services import IncomingFile, document_upload
    from stores.services import store_create

    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.pk})
    document = document_upload(store=store, files=[IncomingFile(filename="a.txt", data=b"words")]).documents[0]
    price = ModelPrice.objects.create(provider_type="openai", model="gpt-table", input_per_mtok=1, output_per_mtok=1)
    project = project_create(
        name="table",
        chat_connection_id=fake_connection.pk,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
    )
    issued = key_create(project=project, name="table", scopes=None, expires_at=None)
    return {
        "url": f"{fake_upstream.url}/v1",
        "connection": fake_connection.pk,
        "connection_id": fake_connection.pk,
        "store_id": store.pk,
        "document_id": document.pk,
        "price_id": price.pk,
        "project_id": project.pk,
        "key_id": issued.api_key.pk,
        "user_id": personas["editor"].pk,
    }


def concrete(route: str, ids: dict) -> str:
    for name in ("connection_id", "store_id", "document_id", "price_id", "project_id", "key_id", "user_id"):
        route = route.replace(f"<id:{name}>", str(ids[name]))
    return "/" + route


def assert_answer(response, *, must_refuse: bool, label: str) -> None:
    assert response.status_code < 500, f"{label}: {response.status_code} {response.text[:300]}"
    if must_refuse:
        assert 400 <= response.status_code < 500, f"{label}: accepted ({response.status_code})"
    if response.status_code >= 400:
        error = response.json()["error"]
        assert {"message", "type", "code"} <= set(error), f"{label}: {error}"


ROWS = sorted(table({"url": "", "connection": 0}), key=lambda row: (row[0], row[1]))


@pytest.mark.parametrize(("route", "method"), ROWS, ids=[f"{m.upper()} {r}" for r, m in ROWS])
def test_hostile_input_is_refused_in_the_envelope(api, objects, settings, route, method):
    settings.MAX_UPLOAD_MB = 1
    spec = table(objects)[(route, method)]
    client = api("admin")
    url = concrete(route, objects)
    send = lambda label, must_refuse, **kwargs: assert_answer(  # noqa: E731
        client.request(method.upper(), url, **kwargs), must_refuse=must_refuse, label=label
    )
    if isinstance(spec, Json):
        for label, body, must_refuse in json_rows(spec):
            send(label, must_refuse, content=json.dumps(body), headers={"Content-Type": "application/json"})
        send("invalid JSON", True, content=b'{"unterminated', headers={"Content-Type": "application/json"})
        send("NUL in raw JSON", True, content=b'{"a\x00": 1}', headers={"Content-Type": "application/json"})
    elif isinstance(spec, Query):
        for name in spec.example:
            send(f"{name}: NUL byte", True, params={**spec.example, name: "\x00"})
            send(f"{name}: huge number", True, params={**spec.example, name: str(HUGE)})
            send(f"{name}: oversized", True, params={**spec.example, name: "x" * 5000})
    elif isinstance(spec, Multipart):
        many = [("files", (f"{n}.txt", f"file {n}".encode(), "text/plain")) for n in range(101)]
        send("more than 100 files", True, files=many)
        send("NUL in a file name", False, files=[("file", ("a\x00b.txt", b"nul name", "text/plain"))])
        send("no files", True, files=[("other", ("a.txt", b"x", "text/plain"))])
        send("JSON instead of a form", True, json={"file": "a.txt"})
        send("oversized body", True, files=[("file", ("big.pdf", b"%PDF" + b"x" * (2 * 1024 * 1024), "x"))])
    else:
        send("a body nobody asked for", False, content=b"\x00" * 1000, headers={"Content-Type": "application/json"})
    if "<id:" in route:
        huge_id = "/" + route.replace(route[route.index("<id:") : route.index(">") + 1], str(HUGE))
        assert_answer(client.request(method.upper(), huge_id), must_refuse=True, label="huge id")


def test_the_unauthenticated_login_refuses_an_oversized_body_without_a_traceback(api, caplog):
    body = b'{"username": "' + b"x" * (12 * 1024 * 1024) + b'"}'
    response = api().post("/admin/api/login", content=body, headers={"Content-Type": "application/json"})

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert "Traceback" not in caplog.text
