"""Errors of the client API, in the OpenAI envelope ``{"error": {"message", "type", "code"}}``
that OpenAI SDKs parse."""

from __future__ import annotations

from django.http import JsonResponse

from gateway.connections.providers.chat import ChatError
from ragmux.core.errors import ServiceError, status_for


class V1Error(Exception):
    """A refusal of /v1 with its own status: some pass an upstream's status through."""

    def __init__(self, message: str, *, status: int, type: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.type = type


# Everything a /v1 view answers in the envelope rather than as an internal error.
V1Refusal = (V1Error, ChatError, ServiceError)


def refusal_status(error: V1Error | ChatError | ServiceError) -> int:
    return status_for(error) if isinstance(error, ServiceError) else error.status


def refusal_response(error: V1Error | ChatError | ServiceError) -> JsonResponse:
    status = refusal_status(error)
    if isinstance(error, ServiceError):
        kind = "invalid_request_error" if status < 500 else "server_error"
    else:
        kind = error.type
    return JsonResponse({"error": {"message": error.message, "type": kind, "code": error.code}}, status=status)
