"""One error envelope for /admin/api and /v1: ``{"error": {"message", "type", "code"}}``.

Services raise :class:`ServiceError` (or a subclass) with an HTTP status and a stable machine
``code``; views never build error bodies themselves.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

logger = logging.getLogger("ragmux.errors")


class ServiceError(Exception):
    status = 400
    code = "bad_request"
    # Seconds the client should wait before retrying, sent as `Retry-After` when set.
    retry_after: int | None = None

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None, **extra: Any):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.extra = extra


class InvalidInput(ServiceError):
    status = 400
    code = "validation_error"

    def __init__(self, message: str, *, field: str | None = None, **extra: Any):
        if field is not None:
            extra.setdefault("fields", {field: [message]})
        super().__init__(message, **extra)


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class UpstreamUnavailable(ServiceError):
    status = 502
    code = "upstream_error"


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


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    request = context.get("request")
    if isinstance(exc, ServiceError):
        response = Response(error_body(exc.status, exc.message, exc.code, **exc.extra), status=exc.status)
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
