"""The health probes, the metrics page and the error pages every route shares."""

from __future__ import annotations

import asyncio
from functools import wraps

import redis.asyncio
from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.clients.metrics import BudgetGaugesCollector, RouteCoolingCollector
from ragmux.core import asyncdb
from ragmux.core import metrics as process_metrics
from ragmux.core.errors import MethodNotAllowed, NotFound, ServerFault, error_response
from ragmux.core.middleware import is_api_path
from stores.metrics import DatabaseGaugesCollector

# Each readiness check may take this long (they run at once), so /readyz answers within a second
# whatever is down or hanging.
READY_CHECK_SECONDS = 0.8


def _wrong_method(request) -> HttpResponse | None:
    if request.method in ("GET", "HEAD"):
        return None
    response = error_response(MethodNotAllowed("method not allowed: probes take GET or HEAD"))
    response["Allow"] = "GET, HEAD"
    return response


def probe(view):
    """Probes only read: GET and HEAD. Anything else gets a JSON 405 rather than Django's CSRF
    page, which a probe has no cookie to pass anyway."""
    if iscoroutinefunction(view):

        async def wrapper(request):
            return _wrong_method(request) or await view(request)

    else:

        def wrapper(request):
            return _wrong_method(request) or view(request)

    return csrf_exempt(wraps(view)(wrapper))


@probe
def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


async def _redis_ready() -> None:
    client = redis.asyncio.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=READY_CHECK_SECONDS, socket_timeout=READY_CHECK_SECONDS
    )
    try:
        await client.ping()
    finally:
        await client.aclose()


async def _failure(check) -> str | None:
    """The name of the exception ``check`` ended with, or None when it passed in time."""
    try:
        await asyncio.wait_for(check(), READY_CHECK_SECONDS)
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        return exc.__class__.__name__
    return None


@probe
async def readyz(request):
    """Ready when PostgreSQL answers; Redis only speeds things up and carries wake-ups, so a web
    process without it stays in rotation and says it is degraded."""
    database, redis_failure = await asyncio.gather(_failure(asyncdb.reachable), _failure(_redis_ready))
    body: dict = {"ready": database is None}
    if database is not None:
        body["problems"] = [f"database: {database}"]
    if redis_failure is not None:
        body["degraded"] = ["redis"]
    return JsonResponse(body, status=200 if database is None else 503)


class _Scrape:
    """What `/metrics` serves: this host's processes and the gauges read from the database."""

    def collect(self):
        yield from process_metrics.this_host().collect()
        yield from DatabaseGaugesCollector().collect()
        yield from BudgetGaugesCollector().collect()
        yield from RouteCoolingCollector().collect()


@probe
def metrics(request):
    # Open, as django_prometheus's view was before it.
    return HttpResponse(generate_latest(_Scrape()), content_type=CONTENT_TYPE_LATEST)


def not_found(request, exception=None):
    if is_api_path(request.path):
        return error_response(NotFound("not found"))
    return render(request, "404.html", status=404)


def server_error(request):
    if is_api_path(request.path):
        request_id = getattr(request, "request_id", "-")
        return error_response(ServerFault(f"internal error (request id {request_id})"))
    return HttpResponse("internal error", status=500, content_type="text/plain")
