"""What every `/v1` endpoint shares: :func:`v1_endpoint` does CORS, the method, the key and its
scope, the error envelope, and the request log row of every call made with a valid key; its
answer's end settles the call (:func:`end_call`)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from gateway.clients import access, limiter, limits
from gateway.clients.ledger import Call
from gateway.clients.models import GatewayKey
from gateway.connections import failover
from gateway.connections.failover import Attempt, Attempts, Plan, Target
from ragmux.core import logs, metrics
from ragmux.core.bodies import body_limit, parse_json
from ragmux.core.errors import (
    CLIENT_CLOSED,
    InvalidInput,
    MethodNotAllowed,
    ServerFault,
    ServiceError,
    body_too_large,
    database_unavailable,
    openai_error_response,
    validation_failed,
)

logger = logging.getLogger("ragmux.gateway.v1")

View = Callable[..., Awaitable[HttpResponse]]
CORS_MAX_AGE = "600"
# What a browser's script may read of a /v1 answer.
EXPOSED_HEADERS = ", ".join(
    ("x-ragmux-rag-hits", "x-ragmux-rag-sources", "x-request-id", "retry-after", *limits.HEADER_NAMES)
)
CLIENT_CLOSED_REASON = "client closed request"


def _cors_origin(request: HttpRequest) -> str | None:
    origin = request.headers.get("Origin")
    allowed = settings.V1_CORS_ORIGINS
    if origin and ("*" in allowed or origin in allowed):
        return origin
    return None


def _with_cors(response: HttpResponse, origin: str | None) -> HttpResponse:
    if origin is not None:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        response["Vary"] = "Origin"
    return response


def _preflight(origin: str | None, methods: tuple[str, ...]) -> HttpResponse:
    response = HttpResponse(status=204)
    if origin is not None:
        response["Access-Control-Allow-Methods"] = ", ".join((*methods, "OPTIONS"))
        response["Access-Control-Allow-Headers"] = "authorization, content-type, x-stainless-*, openai-*"
        response["Access-Control-Max-Age"] = CORS_MAX_AGE
    return _with_cors(response, origin)


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's body, a JSON object within the path's size limit; a body labelled as
    anything but JSON is refused unread (a body without a Content-Type is read as JSON)."""
    media_type = request.content_type or ""
    if request.headers.get("Content-Type") and media_type != "application/json" and not media_type.endswith("+json"):
        raise InvalidInput(
            f"the request body must be JSON (Content-Type: application/json), not {media_type[:100]!r}",
            code="unsupported_media_type",
        )
    limit = body_limit(request.path)
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > limit or len(request.body) > limit:
        raise body_too_large(limit)
    body = parse_json(request.body or b"null")
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object", code="invalid_json")
    return body


def checked(serializer_class, body):
    """The serializer of ``body``, valid, else a 400 naming what is wrong."""
    data = serializer_class(data=body)
    if not data.is_valid():
        raise validation_failed(data.errors, code="invalid_request")
    return data


def validated(serializer_class, body: dict[str, Any]) -> dict[str, Any]:
    return checked(serializer_class, body).validated_data


KeyCheck = Callable[[GatewayKey, str], None]


def _key_check(scope: str | dict[str, str], whole_store: bool) -> KeyCheck:
    def check(api_key: GatewayKey, method: str) -> None:
        access.require_scope(api_key, scope if isinstance(scope, str) else scope[method])
        if whole_store:
            access.require_whole_store(api_key)

    return check


def v1_endpoint(
    *, endpoint: str, scope: str | dict[str, str], methods: tuple[str, ...], whole_store: bool = False
) -> Callable[[View], View]:
    """The view of ``endpoint`` answering ``methods``, for a key holding ``scope`` (or, for a path
    whose methods read and write, the scope of each method); with ``whole_store``, for a key
    without a document scope only (the endpoint lists, reads or changes files whole)."""
    key_check = _key_check(scope, whole_store)

    def decorate(handler: View) -> View:
        @csrf_exempt
        @functools.wraps(handler)
        async def view(request: HttpRequest, **kwargs) -> HttpResponse:
            origin = _cors_origin(request)
            if request.method == "OPTIONS":
                return _preflight(origin, methods)
            if request.method not in methods:
                response = openai_error_response(MethodNotAllowed(f"{request.method} is not allowed here"))
                response["Allow"] = ", ".join(methods)
                return _with_cors(response, origin)
            return _with_cors(await _serve(request, handler, endpoint, key_check, kwargs), origin)

        return view

    return decorate


async def _serve(request: HttpRequest, handler: View, endpoint: str, key_check: KeyCheck, kwargs: dict) -> HttpResponse:
    try:
        api_key = await access.authenticate(authorization=request.headers.get("Authorization", ""), endpoint=endpoint)
    except ServiceError as exc:
        return openai_error_response(exc)
    except Exception as exc:
        if (unavailable := database_unavailable(exc)) is None:
            raise
        logger.warning("/v1/%s: the key could not be read: %s", endpoint, exc)
        return openai_error_response(unavailable)
    logs.note(project_id=api_key.project_id, api_key_id=api_key.pk)
    call = Call(project=api_key.project, key=api_key, endpoint=endpoint)
    try:
        key_check(api_key, request.method)
        response = await handler(request, call, **kwargs)
    except asyncio.CancelledError:
        # The client went away and Django cancelled the view: the upstream call it awaited was
        # closed on the way out (every outbound call is an `async with`), and the call is still
        # recorded. finish() only queues the record, so the cancellation is not held up.
        client_left(call)
        raise
    except ServiceError as exc:
        response = openai_error_response(exc)
        await end_call(call, response.status_code, exc.message)
    except Exception as exc:
        if (unavailable := database_unavailable(exc)) is not None:
            logger.warning("/v1/%s: %s", endpoint, exc)
            response = openai_error_response(unavailable)
            await end_call(call, response.status_code, unavailable.message)
        else:
            request_id = getattr(request, "request_id", "-")
            logger.exception("internal error in /v1/%s (request id %s)", endpoint, request_id)
            await end_call(call, 500, "internal error")
            response = openai_error_response(ServerFault(f"internal error (request id {request_id})"))
    else:
        if not call.relaying:
            call.mark_first_byte()
            await end_call(call, response.status_code)
    for name, value in call.limit_headers.items():
        response[name] = value
    return response


async def end_call(call: Call, status: int, error: str = "") -> None:
    """A call whose answer has ended: its reservation released, then its row queued. The answer
    waits for the release, so a client's next call never finds its previous one still reserved
    (a release in a task of its own lost that race under load)."""
    try:
        await limiter.release(call)
    except asyncio.CancelledError:
        client_left(call)
        raise
    call.finish(status, error)


def client_left(call: Call) -> None:
    call.finish(CLIENT_CLOSED, CLIENT_CLOSED_REASON)
    metrics.increment(metrics.CLIENT_DISCONNECTS, endpoint=call.endpoint)


async def routed(call: Call, plan: Plan, attempts: Attempts, attempt: Attempt, **opening) -> Any:
    """:func:`failover.answer`, with a route's name, the target being tried and its attempts on
    the call's request log row."""
    if plan.route:
        call.route_name = plan.route
        call.attempts = attempts.made

    def trying(target: Target) -> None:
        call.target = target.connection.name

    return await failover.answer(plan, attempts, attempt, trying=trying, **opening)
