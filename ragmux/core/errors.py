"""One family of failures, one map from kind to status, and the two envelopes that say them.

Every failure a service, a provider adapter or a view raises on purpose is a
:class:`ServiceError` kind with a stable machine ``code`` and a message. The HTTP status comes
from the kind, in :data:`STATUS_BY_KIND`, and from nowhere else: views never pick statuses or
build error bodies. Two renderers say a failure:

- the admin envelope, ``{"error": {"message", "type": <HTTP status phrase>, "code", ...}}``
  (:func:`api_exception_handler` for the DRF API, :func:`error_response` for plain views);
- OpenAI's envelope on ``/v1``, ``{"error": {"message", "type": <OpenAI error type>, "code"}}``,
  which OpenAI SDKs parse (:func:`openai_error_response`).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from ragmux.core.units import MIB

logger = logging.getLogger("ragmux.core.errors")

NON_FIELD = "non_field_errors"
# The status a request whose client went away is logged with (nginx's; clients never see it).
CLIENT_CLOSED = 499


class ServiceError(Exception):
    """A refusal the caller can act on. ``extra`` fields join the admin envelope's error object;
    ``beside`` holds top-level fields of the body (such as the documents an upload did store)."""

    code: str | None = "bad_request"
    # The type of OpenAI's envelope; None leaves it to the status (see openai_type_of).
    openai_type: str | None = None
    # Seconds the client should wait before retrying, sent as `Retry-After` when set.
    retry_after: int | None = None
    # Which spend limit refused (`project` or `key`), said in OpenAI's envelope when set.
    scope: str | None = None
    # What a `/v1` client is told instead of ``message``, when the message is for the operator's
    # eyes only (the request log and the admin API keep ``message``).
    client_message: str | None = None

    def __init__(self, message: str, *, code: str | None = None, openai_type: str | None = None, **extra: Any):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if openai_type is not None:
            self.openai_type = openai_type
        self.extra = extra
        self.beside: dict[str, Any] = {}


class InvalidInput(ServiceError):
    code = "validation_error"

    def __init__(self, message: str, *, field: str | None = None, **extra: Any):
        if field is not None:
            extra.setdefault("fields", {field: [message]})
        super().__init__(message, **extra)


class Unauthenticated(ServiceError):
    code = "unauthenticated"


class Forbidden(ServiceError):
    code = "forbidden"


class NotFound(ServiceError):
    code = "not_found"

    @classmethod
    def of(cls, kind: str) -> NotFound:
        """The one wording of a missing object: "<kind> not found"."""
        return cls(f"{kind} not found")


class MethodNotAllowed(ServiceError):
    code = "method_not_allowed"


class RequestTimeout(ServiceError):
    """The client did not send its request in time."""

    code = "request_timeout"


class Conflict(ServiceError):
    code = "conflict"


class TooLarge(ServiceError):
    code = "too_large"


class LimitReached(ServiceError):
    """A quota or size rule refuses what is otherwise valid."""

    code = "limit_reached"


class RateLimited(ServiceError):
    code = "rate_limited"


class ServerFault(ServiceError):
    """Our side cannot do it and the caller cannot fix that: a credential that no longer
    decrypts, a connection that cannot do what it is configured for, an unexpected error."""

    code = "internal_error"


class Unavailable(ServiceError):
    """We cannot do it right now (backlog full, search timed out); retrying later may work."""

    code = "unavailable"


class DatabaseUnavailable(Unavailable):
    """PostgreSQL refused, dropped or did not answer a connection: nothing this request asked
    for can be read or written until it is back."""

    code = "database_unavailable"
    # About one connect timeout: a client retrying sooner would mostly meet the same outage.
    retry_after = 5


# SQLSTATEs of a server going away or not there yet: shut down by an administrator or a crash,
# or still starting.
_SERVER_GOING_AWAY = frozenset({"57P01", "57P02", "57P03"})


def database_unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """The refusal for an exception that means PostgreSQL cannot be reached (psycopg's own, or
    Django's wrapping of it), else None. Only a connection that failed, broke or timed out
    counts: a statement the server refused (a cancelled query, a lock timeout) is not an outage.
    """
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, psycopg.Error):
        cause = cause.__cause__
    if isinstance(cause, psycopg.InterfaceError) or (
        isinstance(cause, psycopg.OperationalError)
        and (cause.sqlstate is None or cause.sqlstate.startswith("08") or cause.sqlstate in _SERVER_GOING_AWAY)
    ):
        return DatabaseUnavailable("the database is unavailable; retry shortly")
    return None


class UpstreamFailed(ServiceError):
    """A model provider refused, failed or could not be reached.

    ``retryable`` says whether the same call may succeed if made again (the chat adapters and
    ingestion retry on it). ``upstream_status`` is set when the provider answered with an error
    status of its own: see :meth:`relayed`.
    """

    code = "upstream_error"
    openai_type = "upstream_error"
    upstream_status: int | None = None

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = False, **extra: Any):
        super().__init__(message, code=code, **extra)
        self.retryable = retryable

    @classmethod
    def relayed(
        cls,
        message: str,
        *,
        status: int,
        openai_type: str,
        code: str | None,
        retryable: bool,
        retry_after: int | None = None,
    ) -> UpstreamFailed:
        """The provider's own refusal, passed on with its status, OpenAI error type, code (none
        when the provider gave none) and ``Retry-After``. A status no HTTP client can be sent
        is said as the kind's own."""
        error = cls(message, openai_type=openai_type, retryable=retryable)
        error.code = code
        error.retry_after = retry_after
        if 400 <= status <= 599:
            error.upstream_status = status
        return error


class UpstreamAuthFailed(UpstreamFailed):
    """A provider refused the credentials of the operator's connection (its 401 or 403): a 502,
    so no client SDK tells its application that the application's own key is wrong. The
    provider's status stays in ``upstream_status`` (the attempts, the route metrics)."""

    code = "upstream_auth_failed"
    openai_type = "upstream_error"


class UpstreamTimeout(UpstreamFailed):
    code = "upstream_timeout"
    openai_type = "timeout"


# Most specific first: the first kind the exception is an instance of decides the status.
STATUS_BY_KIND: tuple[tuple[type[ServiceError], int], ...] = (
    (InvalidInput, 400),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (MethodNotAllowed, 405),
    (RequestTimeout, 408),
    (Conflict, 409),
    (TooLarge, 413),
    (LimitReached, 422),
    (RateLimited, 429),
    (ServerFault, 500),
    (UpstreamTimeout, 504),
    (UpstreamAuthFailed, 502),
    (UpstreamFailed, 502),
    (Unavailable, 503),
    (ServiceError, 400),
)
"""The one map from a failure's kind to its HTTP status, for both envelopes.

One exception: an upstream's own 4xx/5xx (an :class:`UpstreamFailed` made by
:meth:`UpstreamFailed.relayed`) is relayed with the upstream's status, as the reference asks of
``/v1/chat/completions`` (§4.5: "relayed from provider: upstream status + message"), so a
client's SDK raises the error it would have raised calling the provider itself.
"""


def status_for(exc: ServiceError) -> int:
    if isinstance(exc, UpstreamFailed) and exc.upstream_status is not None and not isinstance(exc, UpstreamAuthFailed):
        return exc.upstream_status
    return next(status for kind, status in STATUS_BY_KIND if isinstance(exc, kind))


def _status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a relayed status HTTPStatus does not name
        return "Error"


def _with_retry_after(response, exc: ServiceError):
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response


# --------------------------------------------------------------------------------------------
# The admin envelope
# --------------------------------------------------------------------------------------------


def _admin_envelope(status: int, message: str, code: str | None, **extra: Any) -> dict:
    return {"error": {"message": message, "type": _status_phrase(status), "code": code, **extra}}


def admin_error_body(exc: ServiceError) -> dict:
    return {**_admin_envelope(status_for(exc), exc.message, exc.code, **exc.extra), **exc.beside}


def error_response(exc: ServiceError) -> JsonResponse:
    """The admin envelope from a plain Django view (error handlers, probes, dashboard refusals)."""
    return _with_retry_after(JsonResponse(admin_error_body(exc), status=status_for(exc)), exc)


# --------------------------------------------------------------------------------------------
# OpenAI's envelope (/v1)
# --------------------------------------------------------------------------------------------


def openai_type_of(exc: ServiceError) -> str:
    """The kind's own OpenAI error type, else the one OpenAI uses for such a status."""
    if exc.openai_type is not None:
        return exc.openai_type
    return "invalid_request_error" if status_for(exc) < 500 else "server_error"


def openai_error_body(exc: ServiceError) -> dict:
    error = {"message": exc.client_message or exc.message, "type": openai_type_of(exc), "code": exc.code}
    if exc.scope is not None:
        error["scope"] = exc.scope
    return {"error": error}


# The client API's paths, answered in OpenAI's envelope: `/v1`, and `/v2` for the Cohere v2
# client's rerank.
CLIENT_API_PREFIXES = ("/v1/", "/v2/")


def is_client_api_path(path: str) -> bool:
    """Under a client API prefix, or the prefix itself without its trailing slash (`/v1`)."""
    return f"{path}/".startswith(CLIENT_API_PREFIXES)


def openai_error_response(exc: ServiceError) -> JsonResponse:
    return _with_retry_after(JsonResponse(openai_error_body(exc), status=status_for(exc)), exc)


# --------------------------------------------------------------------------------------------
# Validation errors
# --------------------------------------------------------------------------------------------


def flatten_validation(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """A serializer's nested errors as messages by dotted field name (``messages[0].role``)."""
    fields: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            fields.update(flatten_validation(value, name))
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            fields[prefix or NON_FIELD] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                fields.update(flatten_validation(item, f"{prefix}[{index}]"))
    else:
        fields[prefix or NON_FIELD] = [str(detail)]
    return fields


def validation_failed(detail: Any, *, code: str | None = None) -> InvalidInput:
    """A serializer's errors as one refusal: every message by its field, the first one said."""
    fields = flatten_validation(detail)
    first_field, messages = next(iter(fields.items()))
    message = messages[0] if first_field == NON_FIELD else f"{first_field}: {messages[0]}"
    return InvalidInput(message, code=code, fields=fields)


# --------------------------------------------------------------------------------------------
# The DRF API's one exception handler
# --------------------------------------------------------------------------------------------

_DRF_CODES = {
    exceptions.NotAuthenticated: "unauthenticated",
    exceptions.AuthenticationFailed: "unauthenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.ParseError: "invalid_body",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "rate_limited",
}


def body_too_large(limit: int) -> TooLarge:
    """The one refusal of a request body over a size limit of ``limit`` bytes."""
    return TooLarge(f"request body too large (the limit is {limit / MIB:g} MiB)", code="body_too_large")


def _request_refusal(exc: Exception) -> ServiceError | None:
    """Django's own refusals of a request's size or shape, DRF's validation errors and a database
    out of reach, as kinds."""
    if isinstance(exc, RequestDataTooBig):
        return body_too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if isinstance(exc, TooManyFilesSent):
        return TooLarge(
            f"at most {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files per request; send the rest in another request",
            code="too_many_files",
        )
    if isinstance(exc, TooManyFieldsSent):
        return InvalidInput(f"at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields per request")
    if isinstance(exc, exceptions.ValidationError):
        return validation_failed(exc.detail)
    return database_unavailable(exc)


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    request = context.get("request")
    exc = _request_refusal(exc) or exc
    if isinstance(exc, ServiceError):
        return _with_retry_after(Response(admin_error_body(exc), status=status_for(exc)), exc)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.APIException):
        # DRF's own refusals keep DRF's status (a 401 or 403 by the authenticators' header).
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        if isinstance(exc, exceptions.NotAuthenticated):
            message = "authentication required"
        elif isinstance(exc, exceptions.NotFound):
            message = "not found"
        elif isinstance(exc, exceptions.UnsupportedMediaType):
            # curl's -d sends a form type: say which header the JSON body needs.
            message = f'{exc.detail} Send the JSON body with the header "Content-Type: application/json".'
        else:
            message = str(exc.detail)
        response = Response(_admin_envelope(exc.status_code, message, code), status=exc.status_code)
        if getattr(exc, "auth_header", None):
            response["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            response["Retry-After"] = str(int(exc.wait))
        return response
    request_id = getattr(getattr(request, "_request", request), "request_id", "-")
    logger.exception("internal error (request id %s)", request_id)
    fault = ServerFault(f"internal error (request id {request_id})")
    return Response(admin_error_body(fault), status=status_for(fault))
