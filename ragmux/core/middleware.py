from __future__ import annotations

import uuid

API_PREFIXES = ("/admin/api/", "/v1/")


class ApiResponseHeadersMiddleware:
    """Gives every request an id and keeps API answers out of shared caches."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = uuid.uuid4().hex
        response = self.get_response(request)
        if request.path.startswith(API_PREFIXES):
            response["Cache-Control"] = "no-store"
            response["X-Request-Id"] = request.request_id
        return response
