"""One error envelope for /admin/api and /v1: ``{"error": {"message", "type", "code"}}``.

Services raise :class:`ServiceError` subclasses that say what went wrong (a stable machine
``code`` and a message); the one exception handler below chooses the HTTP status from the
exception's kind. Views never build error bodies or pick statuses themselves.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

logger = logging.getLogger("ragmux.core.errors")


class ServiceError(Exception):
    """A refusal the caller can act on. ``extra`` fields join the envelope's error object;
    ``beside`` holds top-level fields of the body (such as the documents an upload did store)."""

    code = "bad_request"
    # Seconds the client should wait before retrying, sent as `Retry-After` when set.
    retry_after: int | None = None

    def __init__(self, message: str, *, code: str | None = None, **extra: Any):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
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


class Conflict(ServiceError):
    code = "conflict"


class TooLarge(ServiceError):
    code = "too_large"


class LimitReached(ServiceError):
    """A quota or size rule refuses what is otherwise valid."""

    code = "limit_reached"


class RateLimited(ServiceError):
    code = "rate_limited"


class Unavailable(ServiceError):
    """We cannot do it right now (backlog full, search timed out); retrying later may work."""

    code = "unavailable"


class UpstreamFailed(ServiceError):
    """A model provider refused, failed or could not be reached."""

    code = "upstream_error"


class UpstreamTimeout(UpstreamFailed):
    code = "upstream_timeout"


# Most specific first: the first class the exception is an instance of decides the status.
STATUS_BY_KIND: tuple[tuple[type[ServiceError], int], ...] = (
    (InvalidInput, 400),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (TooLarge, 413),
    (LimitReached, 422),
    (RateLimited, 429),
    (UpstreamTimeout, 504),
    (UpstreamFailed, 502),
    (Unavailable, 503),
)


def status_for(exc: ServiceError) -> int:
    return next((status for kind, status in STATUS_BY_KIND if isinstance(exc, kind)), 400)


def service_error_body(exc: ServiceError) -> dict:
    return error_body(status_for(exc), exc.message, exc.code, **exc.extra)


def error_body(status: int, message: str, code: str, **extra: Any) -> dict:
    error = {"message": message, "type": HTTPStatus(status).phrase, "code": code}
    error.update(extra)
    return {"error": error}


def error_response(status: int, message: str, code: str, **extra: Any) -> JsonResponse:
    return JsonResponse(error_body(status, message, code, **extra), status=status)


def _flatten_validation(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            fields.update(_flatten_validation(value, name))
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            fields[prefix or "non_field_errors"] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                fields.update(_flatten_validation(item, f"{prefix}[{index}]"))
    else:
        fields[prefix or "non_field_errors"] = [str(detail)]
    return fields


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


def _request_refusal(exc: Exception) -> ServiceError | None:
    """Django's own refusals of a request's size or shape, said in the envelope."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE // (1024 * 1024)
        return TooLarge(f"the request body is larger than {limit} MiB", code="body_too_large")
    if isinstance(exc, TooManyFilesSent):
        return TooLarge(
            f"at most {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files per request; send the rest in another request",
            code="too_many_files",
        )
    if isinstance(exc, TooManyFieldsSent):
        return InvalidInput(f"at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields per request")
    return None


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    request = context.get("request")
    exc = _request_refusal(exc) or exc
    if isinstance(exc, ServiceError):
        response = Response({**service_error_body(exc), **exc.beside}, status=status_for(exc))
        if exc.retry_after is not None:
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten_validation(exc.detail)
        first_field, messages = next(iter(fields.items()))
        message = messages[0] if first_field == "non_field_errors" else f"{first_field}: {messages[0]}"
        return Response(error_body(400, message, "validation_error", fields=fields), status=400)
    if isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        if isinstance(exc, exceptions.NotAuthenticated):
            message = "authentication required"
        elif isinstance(exc, exceptions.NotFound):
            message = "not found"
        else:
            message = str(exc.detail)
        response = Response(error_body(exc.status_code, message, code), status=exc.status_code)
        if getattr(exc, "auth_header", None):
            response["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            response["Retry-After"] = str(int(exc.wait))
        return response
    request_id = getattr(getattr(request, "_request", request), "request_id", "-")
    logger.exception("internal error (request id %s)", request_id)
    return Response(error_body(500, f"internal error (request id {request_id})", "internal_error"), status=500)
