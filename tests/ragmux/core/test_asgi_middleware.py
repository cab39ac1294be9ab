"""Under the ASGI server every middleware runs in async mode, so async views (the /v1
streams) never pass through a thread; static files and API headers still work there."""

from __future__ import annotations

import httpx
from django.conf import settings
from django.utils.module_loading import import_string


def test_the_middleware_chain_is_fully_async():
    for path in settings.MIDDLEWARE:
        assert getattr(import_string(path), "async_capable", False), f"{path} would put every request in a thread"


def test_static_files_and_api_headers_under_asgi(asgi_url, transactional_db):
    css = httpx.get(f"{asgi_url}/static/ragmux/app.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    missing = httpx.get(f"{asgi_url}/static/ragmux/none.css")
    assert missing.status_code == 404
    api = httpx.get(f"{asgi_url}/v1/models")
    assert api.status_code == 401
    assert api.headers["cache-control"] == "no-store" and len(api.headers["x-request-id"]) == 32
