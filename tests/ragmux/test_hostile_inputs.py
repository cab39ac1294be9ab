"""Every admin API endpoint meets hostile input: wrong types, huge integers, NUL bytes, oversized
strings and bodies, unknown and missing fields. Each answer is below 500, and every refusal is a
4xx in the one envelope.

Every JSON endpoint, admin and `/v1`, signed in or not, meets hostile JSON (nesting past the
limit, numbers JSON cannot carry, lone surrogates, huge strings) and oversized bodies sent with
and without a length: each is refused in its API's envelope, never a 5xx, nothing logged as an
error.

The tables are checked against the URLconf: an endpoint (route and method) added without a row
fails `test_every_endpoint_has_a_row`, a `/v1` route the hostile-JSON test, so new endpoints must
join them.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from http import HTTPStatus

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragmux.core.bodies import MAX_JSON_DEPTH
from tests.helpers import api_routes, chunked, client_api_routes, served_methods

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
    store = {"name": "kb2", "embedding_connection_id": ids["connection"], "chunk_size": 500, "rerank_route_id": None}
    project = {
        "name": "app",
        "chat_connection_id": ids["connection"],
        "system_prompt": "Be brief.",
        "allowed_route_ids": [],
    }
    route = {"name": "r2", "kind": "chat", "strategy": "weighted", "targets": [{"connection_id": ids["connection"]}]}
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
        # `action` is left out: any short text, digits too, is a prefix one may filter by.
        ("admin/api/audit", "get"): Query(
            {"object_type": "store", "object_id": 1, "document": 1, "since": "2026-01-01T00:00:00Z", "page": 1}
        ),
        ("admin/api/audit.ndjson", "get"): Query(
            {"object_type": "document", "object_id": 1, "document": 1, "until": "2026-01-01T00:00:00Z"}
        ),
        ("admin/api/security/logins", "get"): NoInput(),
        ("admin/api/provider-types", "get"): NoInput(),
        ("admin/api/models", "get"): NoInput(),
        ("admin/api/models", "post"): Json(connection),
        ("admin/api/models/test", "post"): Json(
            {**{k: v for k, v in connection.items() if k != "name"}, "mode": "chat", "connection_id": ids["connection"]}
        ),
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
        ("admin/api/routes", "get"): NoInput(),
        ("admin/api/routes", "post"): Json(route),
        ("admin/api/routes/<id:route_id>", "get"): NoInput(),
        ("admin/api/routes/<id:route_id>", "put"): Json(route),
        ("admin/api/routes/<id:route_id>", "delete"): NoInput(),
        ("admin/api/rag-stores", "get"): NoInput(),
        ("admin/api/rag-stores", "post"): Json(store),
        ("admin/api/rag-stores/<id:store_id>", "get"): NoInput(),
        ("admin/api/rag-stores/<id:store_id>", "put"): Json(store),
        ("admin/api/rag-stores/<id:store_id>", "patch"): Json({"top_k": 7}, empty_is_valid=True),
        ("admin/api/rag-stores/<id:store_id>", "delete"): NoInput(),
        ("admin/api/rag-stores/<id:store_id>/documents", "get"): Query({"status": "ready", "page": 1}),
        ("admin/api/rag-stores/<id:store_id>/documents", "post"): Multipart(),
        ("admin/api/rag-stores/<id:store_id>/documents/text", "post"): Json(
            {"title": "t", "content": "words", "attributes": {"customer": "acme"}}, long_text=("content",)
        ),
        ("admin/api/rag-stores/<id:store_id>/reprocess", "post"): Json({"status": "failed"}, empty_is_valid=True),
        ("admin/api/rag-stores/<id:store_id>/search", "post"): Json(
            {
                "query": "words",
                "top_k": 3,
                "fusion": "rrf",
                "rerank": False,
                "rerank_backend": "llm",
                "rerank_connection_id": 1,
                "filters": {"type": "eq", "key": "customer", "value": "acme"},
            }
        ),
        **evaluation_rows(),
        ("admin/api/documents/<id:document_id>", "get"): NoInput(),
        ("admin/api/documents/<id:document_id>", "patch"): Json(
            {"attributes": {"customer": "acme"}, "tags": ["hr"]}, empty_is_valid=True
        ),
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
        ("admin/api/projects/<id:project_id>/keys", "post"): Json(
            {"name": "k", "scopes": ["chat"], "filters": {"type": "eq", "key": "customer", "value": "acme"}}
        ),
        ("admin/api/projects/<id:project_id>/logs", "get"): NoInput(),
        ("admin/api/projects/<id:project_id>/usage", "get"): NoInput(),
        ("admin/api/keys", "get"): Query({"project": 1, "revoked": "true", "scope": "chat", "page": 1}),
        ("admin/api/keys/<id:key_id>", "patch"): Json(
            {
                "name": "k2",
                "scopes": ["chat"],
                "budget_monthly_tokens": 1000,
                "filters": {"type": "eq", "key": "customer", "value": "acme"},
            },
            empty_is_valid=True,
        ),
        ("admin/api/keys/<id:key_id>", "delete"): NoInput(),
        ("admin/api/keys/<id:key_id>/rotate", "post"): NoInput(),
        ("admin/api/keys/<id:key_id>/usage", "get"): NoInput(),
        ("admin/api/usage/summary", "get"): Query({"window": "168h", "days": 7, "compare": 1, "by_project": 1}),
        ("admin/api/request-logs", "get"): Query({**log_filters, "cursor": "YmVmb3JlOjEwMA", "limit": 10}),
        ("admin/api/request-logs.csv", "get"): Query(log_filters),
    }


def evaluation_rows() -> dict[tuple[str, str], object]:
    sets = "admin/api/rag-stores/<id:store_id>/eval-sets"
    one = f"{sets}/<id:set_id>"
    judged = {"text": "a question", "judgements": [{"document_id": 1, "grade": 2}]}
    return {
        (sets, "get"): NoInput(),
        (sets, "post"): Json({"name": "set", "questions": [judged]}),
        (f"{sets}/import", "post"): Multipart(),
        (one, "get"): NoInput(),
        (one, "patch"): Json({"name": "renamed"}),
        (one, "delete"): NoInput(),
        (f"{one}/questions", "post"): Json(judged),
        (f"{one}/questions/<id:question_id>", "patch"): Json(judged, empty_is_valid=True),
        (f"{one}/questions/<id:question_id>", "delete"): NoInput(),
        (f"{one}/runs", "get"): NoInput(),
        (f"{one}/runs", "post"): Json({"configs": [{"label": "A", "overrides": {"mode": "lexical", "top_k": 3}}]}),
        (f"{one}/runs/<id:run_id>", "get"): NoInput(),
        (f"{one}/runs/<id:run_id>", "delete"): NoInput(),
        (f"{one}/runs/<id:run_id>/apply", "post"): NoInput(),
        (f"{one}/compare", "get"): Query({"a": 1, "b": 2}),
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
    from gateway.connections.route_services import TargetSpec, route_create
    from ingestion.services import IncomingFile, document_upload
    from retrieval.evaluation.run_services import evaluation_runs_start
    from retrieval.evaluation.services import evaluation_set_create
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
    route = route_create(
        name="table", kind="chat", strategy="ordered", targets=[TargetSpec(connection_id=fake_connection.pk)]
    )
    evaluation_set = evaluation_set_create(
        store=store, name="table", questions=[{"text": "q", "judgements": [{"document_id": document.pk}]}]
    )
    (run,) = evaluation_runs_start(evaluation_set=evaluation_set, configs=[{"label": "A"}], enqueue=False)
    return {
        "set_id": evaluation_set.pk,
        "question_id": evaluation_set.questions.get().pk,
        "run_id": run.pk,
        "route_id": route.pk,
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
    for name, value in ids.items():
        route = route.replace(f"<id:{name}>", str(value))
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


@pytest.mark.parametrize(
    ("route", "method"),
    [("admin/api/rag-stores/<id:store_id>/search", "post"), ("admin/api/rag-stores/<id:store_id>", "patch")],
)
def test_a_search_or_store_fusion_that_is_no_rule_is_a_400_naming_the_valid_ones(api, objects, route, method):
    body = {"query": "words", "fusion": "rank"} if route.endswith("search") else {"fusion": "rank"}
    response = api("admin").request(method.upper(), concrete(route, objects), json=body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["fields"]["fusion"] == ['"rank" is not a fusion rule: valid are scores, rrf']


def test_the_unauthenticated_login_refuses_an_oversized_body_without_a_traceback(api, caplog):
    body = b'{"username": "' + b"x" * (12 * 1024 * 1024) + b'"}'
    response = api().post("/admin/api/login", content=body, headers={"Content-Type": "application/json"})

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert "Traceback" not in caplog.text


# --------------------------------------------------------------------------------------------
# Hostile JSON, to every JSON endpoint of both APIs
# --------------------------------------------------------------------------------------------

# A JSON example for every client API route that reads a body; None for those that only answer GET.
RERANK_EXAMPLE = {"model": "text-embedding-3-small", "query": "launch code", "documents": ["a", "launch code"]}
CLIENT_API = {
    "v1/chat/completions": {"messages": [{"content": "launch code?", "role": "user"}], "temperature": 0.2},
    "v1/retrieve": {"query": "launch code", "top_k": 2},
    "v1/embeddings": {"input": ["launch code", "handbook"]},
    "v1/rerank": RERANK_EXAMPLE,
    "v2/rerank": RERANK_EXAMPLE,
    "v1/models": None,
    "v1/models/<path:model_id>": None,
    "v1/responses": {"input": "launch code?", "temperature": 0.2, "top_p": 0.5, "metadata": {"topic": "falcon"}},
    "v1/responses/<str:response_id>": None,
    "v1/responses/<str:response_id>/input_items": None,
    # A multipart upload: JSON is refused as such (docs/files-and-vector-stores.md).
    "v1/files": None,
    "v1/files/<str:file_id>": None,
    "v1/files/<str:file_id>/content": None,
    "v1/vector_stores": {"name": "notes", "metadata": {"topic": "falcon"}, "file_ids": []},
    "v1/vector_stores/<str:vector_store_id>": {"name": "renamed", "metadata": {"topic": "falcon"}},
    "v1/vector_stores/<str:vector_store_id>/search": {"query": "launch code", "max_num_results": 2},
    "v1/vector_stores/<str:vector_store_id>/files": {"file_id": "file-1", "attributes": {"topic": "falcon"}},
    "v1/vector_stores/<str:vector_store_id>/files/<str:file_id>": {"attributes": {"topic": "falcon"}},
    "v1/vector_stores/<str:vector_store_id>/file_batches": {"file_ids": ["file-1"], "attributes": {"year": 2024}},
    "v1/vector_stores/<str:vector_store_id>/file_batches/<str:batch_id>": None,
    "v1/vector_stores/<str:vector_store_id>/file_batches/<str:batch_id>/cancel": None,
    "v1/vector_stores/<str:vector_store_id>/file_batches/<str:batch_id>/files": None,
}
CLIENT_JSON = sorted(route for route, example in CLIENT_API.items() if example is not None)
ADMIN_JSON = [
    (route, method) for route, method in ROWS if isinstance(table({"url": "", "connection": 0})[(route, method)], Json)
]
# What a hostile body may be answered: refused by its parse or its size, or before the body is
# read (no credentials, no such object, a method the route does not serve).
REFUSALS = {400, 401, 403, 404, 405, 413}
# Strings within every body limit (the smallest is `/v1`'s, V1_MAX_BODY_MB: 4 MiB by default).
HUGE_SIZES = (64 * 1024, 1024 * 1024, 3 * 1024 * 1024)


def nested(depth: int, opening: str) -> str:
    if opening == "[":
        return "[" * depth + "]" * depth
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def lone_surrogate(before: str, code: int, after: str) -> str:
    """A JSON string holding the escape of one surrogate without its partner (``before`` and
    ``after`` are escaped to ASCII, so an astral character in them is a whole pair)."""
    return json.dumps(before)[:-1] + f"\\u{code:04x}" + json.dumps(after)[1:]


_PLACEHOLDER = "\x00hostile\x00"


def with_value(example: dict, target: str | None, value: str) -> bytes:
    """The example body with the JSON text ``value`` as the value of ``target``, or as the whole
    body when ``target`` is None."""
    if target is None:
        return value.encode()
    return json.dumps({**example, target: _PLACEHOLDER}).replace(json.dumps(_PLACEHOLDER), value).encode()


def with_key(example: dict, key: str) -> bytes:
    """The example body with one more member, named by the JSON text ``key``."""
    return (json.dumps(example)[:-1] + (", " if example else "") + key + ": 1}").encode()


DEEP = st.builds(nested, st.integers(MAX_JSON_DEPTH + 1, 5000), st.sampled_from("[{"))
NOT_A_JSON_NUMBER = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
LONE_SURROGATE = st.builds(lone_surrogate, st.text(max_size=20), st.integers(0xD800, 0xDFFF), st.text(max_size=20))
HUGE_STRING = st.sampled_from(HUGE_SIZES).map(lambda size: json.dumps("x" * size))


REFUSED_VALUES = {"deep": DEEP, "not a JSON number": NOT_A_JSON_NUMBER, "lone surrogate": LONE_SURROGATE}


@st.composite
def hostile_bodies(draw, example: dict) -> tuple[str, bytes, bool]:
    """(what it is, the body, whether it must be refused): one hostile value put in the example,
    as a field's value, a new field, a new key or the whole body. A huge string within the body
    limit need not be refused, only answered without a fault."""
    kind = draw(st.sampled_from([*REFUSED_VALUES, "lone surrogate key", "huge string"]))
    if kind == "lone surrogate key":
        return kind, with_key(example, draw(LONE_SURROGATE)), True
    target = draw(st.sampled_from([*example, "hostile", None]))
    if kind == "huge string":
        return f"{kind} in {target}", with_value(example, target, draw(HUGE_STRING)), False
    return f"{kind} in {target}", with_value(example, target, draw(REFUSED_VALUES[kind])), True


HOSTILE = settings(
    max_examples=15,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def errors_logged(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


def admin_error(response) -> dict:
    error = response.json()["error"]
    assert error["type"] == HTTPStatus(response.status_code).phrase and error["message"] and error["code"]
    return error


def client_api_error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}, body
    assert re.fullmatch(r"[a-z_]+", body["error"]["type"]), body
    return body["error"]


def check_hostile_answer(response, label: str, must_refuse: bool, envelope, caplog) -> None:
    status = response.status_code
    assert status < 500, f"{label}: {status} {response.text[:300]}"
    if must_refuse:
        assert status in REFUSALS, f"{label}: {status} {response.text[:300]}"
    if status >= 400:
        envelope(response)
    assert errors_logged(caplog) == [], label


@pytest.mark.parametrize("persona", [None, "admin"], ids=["unauthenticated", "admin"])
@pytest.mark.parametrize(("route", "method"), ADMIN_JSON, ids=[f"{m.upper()} {r}" for r, m in ADMIN_JSON])
def test_hostile_json_to_the_admin_api_is_refused_in_its_envelope(api, objects, caplog, route, method, persona):
    example = table(objects)[(route, method)].example
    client, url = api(persona), concrete(route, objects)

    @HOSTILE
    @given(case=hostile_bodies(example))
    def check(case):
        label, body, must_refuse = case
        caplog.clear()
        response = client.request(method.upper(), url, content=body, headers={"Content-Type": "application/json"})
        check_hostile_answer(response, label, must_refuse, admin_error, caplog)

    check()


@pytest.fixture
def gateway_key(objects, fake_connection, ingest_now) -> str:
    """A key of a project that chats, embeds and retrieves from a store with one ingested document,
    and reranks with the store's rerank connection (the fake's chat model)."""
    from gateway.clients.services import key_create, project_create
    from stores.models import RagStore

    ingest_now()
    RagStore.objects.filter(pk=objects["store_id"]).update(rerank_connection=fake_connection, rerank_backend="llm")
    project = project_create(
        name="hostile",
        chat_connection_id=fake_connection.pk,
        embedding_connection_id=fake_connection.pk,
        store_id=objects["store_id"],
        system_prompt="",
    )
    return key_create(project=project, name="hostile", scopes=None, expires_at=None).key


CLIENT_API_IDS = {
    "<path:model_id>": "text-embedding-3-small",
    "<str:response_id>": "resp_1",
    "<str:file_id>": "file-1",
    "<str:vector_store_id>": "vs_1",
    "<str:batch_id>": "vsfb_1",
}


def client_api_url(route: str) -> str:
    for placeholder, value in CLIENT_API_IDS.items():
        route = route.replace(placeholder, value)
    return "/" + route


@pytest.mark.parametrize("signed", [False, True], ids=["no key", "gateway key"])
@pytest.mark.parametrize("route", client_api_routes())
def test_hostile_json_to_the_client_api_is_refused_in_its_envelope(v1, asgi_url, gateway_key, caplog, route, signed):
    assert route in CLIENT_API, "a client API route without a row in CLIENT_API"
    client = v1(gateway_key if signed else None)
    url = asgi_url + client_api_url(route)

    @HOSTILE
    @given(case=hostile_bodies(CLIENT_API[route] or {}))
    def check(case):
        label, body, must_refuse = case
        caplog.clear()
        response = client.post(url, content=body, headers={"Content-Type": "application/json"})
        check_hostile_answer(response, label, must_refuse, client_api_error, caplog)

    check()


# The failures issue 23 reproduced, each the answer of one malformed body.
ISSUE_REPRODUCTIONS = {
    "nested 5,000 deep": lambda example: with_value(example, None, nested(5000, "[")),
    "nested 5,000 deep in a field": lambda example: with_value(example, "metadata", nested(5000, "{")),
    "NaN": lambda example: with_value(example, "temperature", "NaN"),
    "Infinity": lambda example: with_value(example, "top_p", "Infinity"),
    "a lone surrogate in the first text": lambda example: re.sub(
        r'(: \[?")', r"\1\\ud800", json.dumps(example), count=1
    ).encode(),
}
LOGIN = {"username": "admin", "password": "correct horse battery"}


@pytest.mark.parametrize("case", sorted(ISSUE_REPRODUCTIONS))
def test_the_unauthenticated_login_refuses_malformed_json_with_a_400(api, caplog, case):
    response = api().post(
        "/admin/api/login", content=ISSUE_REPRODUCTIONS[case](LOGIN), headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 400, response.text
    assert admin_error(response)["code"] == "invalid_json"
    assert errors_logged(caplog) == []


@pytest.mark.parametrize("case", sorted(ISSUE_REPRODUCTIONS))
@pytest.mark.parametrize("route", CLIENT_JSON)
def test_the_client_api_refuses_malformed_json_with_a_400(v1, asgi_url, gateway_key, caplog, route, case):
    body = ISSUE_REPRODUCTIONS[case](CLIENT_API[route])
    response = v1(gateway_key).post(asgi_url + client_api_url(route), content=body)

    assert response.status_code == 400, response.text
    assert client_api_error(response)["code"] == "invalid_json"
    assert errors_logged(caplog) == []


# --------------------------------------------------------------------------------------------
# Oversized bodies, with and without a length, over HTTP (Django's test client always sends a
# length, so the server reading a chunked body is only met this way)
# --------------------------------------------------------------------------------------------

SMALL_LIMIT = 1024 * 1024


def every_json_endpoint(ids: dict) -> list[tuple[str, str, dict, object]]:
    """(method, path, example, envelope) for every JSON endpoint of both APIs."""
    admin = [
        (method.upper(), concrete(route, ids), table(ids)[(route, method)].example, admin_error)
        for route, method in ADMIN_JSON
    ]
    client = [("POST", client_api_url(route), CLIENT_API[route], client_api_error) for route in CLIENT_JSON]
    return admin + client


@pytest.mark.parametrize("is_chunked", [True, False], ids=["chunked", "with a length"])
@pytest.mark.parametrize("signed", [False, True], ids=["unauthenticated", "signed in"])
def test_an_oversized_body_is_a_413_in_its_envelope_chunked_or_not(
    asgi_url, transactional_db, objects, gateway_key, personas, settings, caplog, signed, is_chunked
):
    from ragmux.core.authentication import issue_admin_token

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.V1_MAX_BODY_MB = SMALL_LIMIT, SMALL_LIMIT // (1024 * 1024)
    admin_token = issue_admin_token(user=personas["admin"])
    with httpx.Client(base_url=asgi_url, timeout=30) as client:
        for method, path, example, envelope in every_json_endpoint(objects):
            token = (gateway_key if path.startswith(("/v1/", "/v2/")) else admin_token) if signed else None
            headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
            body = json.dumps({**example, "padding": "x" * SMALL_LIMIT}).encode()
            response = client.request(method, path, content=chunked(body) if is_chunked else body, headers=headers)

            assert response.status_code == 413, f"{method} {path}: {response.status_code} {response.text[:300]}"
            error = envelope(response)
            assert (error["code"], error["message"]) == (
                "body_too_large",
                "request body too large (the limit is 1 MiB)",
            )
    assert errors_logged(caplog) == []


def test_a_chunked_body_within_the_limit_is_read_as_one_with_a_length(asgi_url, transactional_db, personas):
    body = json.dumps({**LOGIN, "bearer": True}).encode()
    signed_in = httpx.post(
        f"{asgi_url}/admin/api/login", content=chunked(body, 16), headers={"Content-Type": "application/json"}
    )

    assert signed_in.status_code == 200, signed_in.text
    me = httpx.get(f"{asgi_url}/admin/api/me", headers={"Authorization": f"Bearer {signed_in.json()['token']}"})
    assert me.json()["username"] == "admin"
