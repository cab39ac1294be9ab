"""Errors of the client API, in the OpenAI envelope ``{"error": {"message", "type", "code"}}``
that OpenAI SDKs parse."""

from __future__ import annotations

from django.http import JsonResponse

from ragmux.errors import ServiceError


class V1Error(ServiceError):
    def __init__(self, message: str, *, status: int, type: str = "invalid_request_error", code: str | None = None):
        super().__init__(message, status=status)
        self.code = code
        self.type = type


def openai_type(error: ServiceError) -> str:
    if isinstance(error, V1Error):
        return error.type
    return "invalid_request_error" if error.status < 500 else "server_error"


def v1_error_response(status: int, message: str, *, type: str, code: str | None) -> JsonResponse:
    return JsonResponse({"error": {"message": message, "type": type, "code": code}}, status=status)
