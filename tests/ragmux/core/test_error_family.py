"""Every failure kind, said by both renderers: the admin envelope and OpenAI's (/v1).

Each row is one failure as a service, an adapter or a view raises it, and what a client is
told: the status (from the one kind -> status map, or an upstream's own status relayed), the
type of each envelope, the code and any `Retry-After`.
"""

from __future__ import annotations

import json
from http import HTTPStatus

import pytest

from gateway.connections.guard import UpstreamBlocked
from gateway.connections.providers.chat import NoChat
from gateway.connections.providers.embeddings import NoEmbeddings
from gateway.connections.providers.local_model import LocalModelError
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import (
    STATUS_BY_KIND,
    Conflict,
    Forbidden,
    InvalidInput,
    LimitReached,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    RequestTimeout,
    ServerFault,
    ServiceError,
    TooLarge,
    Unauthenticated,
    Unavailable,
    UpstreamAuthFailed,
    UpstreamFailed,
    UpstreamTimeout,
    api_exception_handler,
    error_response,
    openai_error_response,
    validation_failed,
)


def limited() -> RateLimited:
    error = RateLimited("slow down")
    error.retry_after = 30
    return error


def relayed(status: int, openai_type: str, code: str | None, retry_after: int | None = None) -> UpstreamFailed:
    return UpstreamFailed.relayed(
        f"openai answered HTTP {status}", status=status, openai_type=openai_type, code=code, retryable=False,
        retry_after=retry_after,
    )  # fmt: skip


# (failure, status, admin type, OpenAI type, code, Retry-After)
ROWS = [
    (ServiceError("no"), 400, "Bad Request", "invalid_request_error", "bad_request", None),
    (InvalidInput("bad", field="name"), 400, "Bad Request", "invalid_request_error", "validation_error", None),
    (InvalidInput("bad body", code="invalid_json"), 400, "Bad Request", "invalid_request_error", "invalid_json", None),
    (Unauthenticated("who?"), 401, "Unauthorized", "invalid_request_error", "unauthenticated", None),
    (
        Unauthenticated("invalid project api key", code="invalid_api_key", openai_type="invalid_api_key"),
        401,
        "Unauthorized",
        "invalid_api_key",
        "invalid_api_key",
        None,
    ),
    (Forbidden("no"), 403, "Forbidden", "invalid_request_error", "forbidden", None),
    (NotFound.of("store"), 404, "Not Found", "invalid_request_error", "not_found", None),
    (MethodNotAllowed("GET"), 405, "Method Not Allowed", "invalid_request_error", "method_not_allowed", None),
    (RequestTimeout("too slow"), 408, "Request Timeout", "invalid_request_error", "request_timeout", None),
    (Conflict("taken"), 409, "Conflict", "invalid_request_error", "conflict", None),
    (NoChat("cannot chat"), 409, "Conflict", "invalid_request_error", "chat_unavailable", None),
    (NoEmbeddings("cannot embed"), 409, "Conflict", "invalid_request_error", "embedding_unavailable", None),
    (TooLarge("big"), 413, HTTPStatus(413).phrase, "invalid_request_error", "too_large", None),
    (LimitReached("quota"), 422, HTTPStatus(422).phrase, "invalid_request_error", "limit_reached", None),
    (limited(), 429, "Too Many Requests", "invalid_request_error", "rate_limited", "30"),
    (ServerFault("broken"), 500, "Internal Server Error", "server_error", "internal_error", None),
    (DecryptionFailed("wrong key"), 500, "Internal Server Error", "server_error", "decryption_failed", None),
    (LocalModelError("bad file"), 500, "Internal Server Error", "server_error", "local_model_unusable", None),
    (UpstreamFailed("down"), 502, "Bad Gateway", "upstream_error", "upstream_error", None),
    (UpstreamBlocked("private"), 502, "Bad Gateway", "upstream_error", "private_upstream", None),
    (Unavailable("busy"), 503, "Service Unavailable", "server_error", "unavailable", None),
    (UpstreamTimeout("slow"), 504, "Gateway Timeout", "timeout", "upstream_timeout", None),
    # A provider refusing the connection's own credentials: a 502, its 401 kept for the attempts.
    (
        UpstreamAuthFailed.relayed(
            "refused", status=401, openai_type="upstream_error", code="upstream_auth_failed", retryable=False
        ),
        502,
        "Bad Gateway",
        "upstream_error",
        "upstream_auth_failed",
        None,
    ),
    # An upstream's own refusal keeps its status, type and code (none, when it gave none).
    (
        relayed(401, "authentication_error", "invalid_api_key"),
        401,
        "Unauthorized",
        "authentication_error",
        "invalid_api_key",
        None,
    ),  # fmt: skip
    (relayed(429, "rate_limit_error", None, 12), 429, "Too Many Requests", "rate_limit_error", None, "12"),
    (relayed(500, "upstream_error", None), 500, "Internal Server Error", "upstream_error", None, None),
    # A status no client can be sent is the kind's own.
    (relayed(999, "upstream_error", None), 502, "Bad Gateway", "upstream_error", None, None),
]
NAMES = [f"{type(row[0]).__name__}-{row[1]}" for row in ROWS]


def test_every_kind_has_a_row():
    kinds = {kind for kind, _ in STATUS_BY_KIND}
    assert kinds <= {type(row[0]) for row in ROWS}


@pytest.mark.parametrize(("failure", "status", "admin_type", "openai_type", "code", "retry_after"), ROWS, ids=NAMES)
def test_the_admin_envelope(failure, status, admin_type, openai_type, code, retry_after):
    for response in (api_exception_handler(failure, {"request": None}), error_response(failure)):
        # DRF's Response is rendered by the view that returns it; its data is the body.
        body = response.data if hasattr(response, "data") else json.loads(response.content)
        assert response.status_code == status
        assert (body["error"]["message"], body["error"]["type"], body["error"]["code"]) == (
            failure.message,
            admin_type,
            code,
        )
        assert response.get("Retry-After") == retry_after


@pytest.mark.parametrize(("failure", "status", "admin_type", "openai_type", "code", "retry_after"), ROWS, ids=NAMES)
def test_the_openai_envelope(failure, status, admin_type, openai_type, code, retry_after):
    response = openai_error_response(failure)
    assert response.status_code == status
    assert json.loads(response.content) == {"error": {"message": failure.message, "type": openai_type, "code": code}}
    assert response.get("Retry-After") == retry_after


def test_the_admin_envelope_carries_a_kinds_extra_fields_and_whats_beside():
    failure = InvalidInput("name is required", field="name")
    failure.beside["documents"] = []
    body = json.loads(error_response(failure).content)
    assert body == {
        "error": {
            "message": "name is required",
            "type": "Bad Request",
            "code": "validation_error",
            "fields": {"name": ["name is required"]},
        },
        "documents": [],
    }


@pytest.mark.parametrize(
    ("detail", "message", "fields"),
    [
        ({"name": ["required"]}, "name: required", {"name": ["required"]}),
        (
            {"messages": [{}, {"role": ["not a role"]}]},
            "messages[1].role: not a role",
            {"messages[1].role": ["not a role"]},
        ),
        ({"non_field_errors": ["pick one"]}, "pick one", {"non_field_errors": ["pick one"]}),
        (["pick one", "or another"], "pick one", {"non_field_errors": ["pick one", "or another"]}),
    ],
)
def test_validation_errors_flatten_to_dotted_fields_and_say_the_first(detail, message, fields):
    failure = validation_failed(detail)
    assert (failure.message, failure.extra["fields"], failure.code) == (message, fields, "validation_error")
    assert validation_failed(detail, code="invalid_request").code == "invalid_request"
