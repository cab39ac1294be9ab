from __future__ import annotations

import uuid

API_PREFIXES = ("/admin/api/", "/v1/")


def is_api_path(path: str) -> bool:
    """Under an API prefix, or the prefix itself without its trailing slash (`/admin/api`)."""
    return f"{path}/".startswith(API_PREFIXES)


class ApiResponseHeadersMiddleware:
    """Gives every request an id and keeps API answers out of shared caches."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = uuid.uuid4().hex
        response = self.get_response(request)
        if is_api_path(request.path):
            response["Cache-Control"] = "no-store"
            response["X-Request-Id"] = request.request_id
        return response


class SecureCookiesOverHttpsMiddleware:
    """Marks every cookie `Secure` on an https request, including one a trusted proxy reports
    through X-Forwarded-Proto: Django only applies the fixed SESSION_COOKIE_SECURE setting."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.is_secure():
            for morsel in response.cookies.values():
                morsel["secure"] = True
        return response
