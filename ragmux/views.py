"""The health probes, the metrics page and the error pages every route shares."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import wraps

import redis.asyncio
from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import generate_latest

from gateway.clients.metrics import BudgetGaugesCollector, RouteCoolingCollector
from ragmux.core import asyncdb, metrics_access, readiness
from ragmux.core import metrics as process_metrics
from ragmux.core.errors import (
    MethodNotAllowed,
    NotFound,
    ServerFault,
    error_response,
    is_client_api_path,
    openai_error_response,
)
from ragmux.core.middleware import is_api_path
from stores.backends import pg_search_status
from stores.choices import SearchBackend
from stores.metrics import DatabaseGaugesCollector
from stores.selectors import stores_searching_with

# Each readiness check may take this long (they run at once), so /readyz answers within a second
# whatever is down or hanging.
READY_CHECK_SECONDS = 0.8
# The schema is read by the ORM, in threads of their own: not the event loop's default executor,
# whose threads a closing loop waits for (a probe must not wait on a read it gave up on).
_schema_readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="readyz-schema")


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


@dataclass
class _Schema:
    migrations: readiness.MigrationState | None = None
    degraded: list[str] = field(default_factory=list)


def _read_schema() -> _Schema:
    """The migrations against this build's, and the features the database lacks (blocking)."""
    try:
        schema = _Schema(readiness.migration_state())
        if schema.migrations.behind:
            return schema  # the tables read below may not be there yet
        if schema.migrations.unknown:
            schema.degraded.append(
                f"the database has {schema.migrations.unknown} migration(s) this build does not know "
                "(a newer build migrated it)"
            )
        if not pg_search_status().available:
            configured = stores_searching_with(backend=SearchBackend.PG_SEARCH)
            if configured:
                schema.degraded.append(
                    f"pg_search is not installed on this server; {configured} rag store(s) configured for it "
                    "fall back to pgvector"
                )
        return schema
    finally:
        connection.close()


async def _schema_within_time(schema: _Schema) -> None:
    found = await asyncio.wrap_future(_schema_readers.submit(_read_schema))
    schema.migrations, schema.degraded = found.migrations, found.degraded


@probe
async def readyz(request):
    """Ready when PostgreSQL answers and has every migration of this build; Redis only speeds
    things up and carries wake-ups, and pg_search only some stores' lexical side, so a web
    process without them stays in rotation and says what is degraded."""
    schema = _Schema()
    database, redis_failure, schema_failure = await asyncio.gather(
        _failure(asyncdb.reachable), _failure(_redis_ready), _failure(lambda: _schema_within_time(schema))
    )
    problems = [
        f"{name}: {failure}" for name, failure in (("database", database), ("migrations", schema_failure)) if failure
    ]
    migrating = schema.migrations is not None and schema.migrations.behind
    ready = not problems and not migrating
    body: dict = {"ready": ready, "status": "ok" if ready else "migrating" if migrating else "unavailable"}
    if schema.migrations is not None:
        body["migrations"] = schema.migrations.applied
        body["expected_migrations"] = schema.migrations.expected
    if problems:
        body["problems"] = problems
    degraded = (["redis"] if redis_failure is not None else []) + schema.degraded
    if degraded:
        body["degraded"] = degraded
    return JsonResponse(body, status=200 if ready else 503)


class HostMetrics:
    """What `/metrics` serves, on the public port or on METRICS_LISTEN (`ragmux.launch.cli`): this
    host's processes and the gauges read from the database."""

    def collect(self):
        yield from process_metrics.this_host().collect()
        yield from process_metrics.BuildInfoCollector().collect()
        yield from DatabaseGaugesCollector().collect()
        yield from BudgetGaugesCollector().collect()
        yield from RouteCoolingCollector().collect()


@probe
def metrics(request):
    """Absent (404) unless served on this port (ragmux.core.metrics_access); then for the token."""
    if not metrics_access.on_public_port(
        enabled=settings.METRICS_ENABLED, token=settings.METRICS_TOKEN, listen=settings.METRICS_LISTEN
    ):
        return not_found(request)
    refused = metrics_access.refusal(
        authorization=request.headers.get("Authorization", ""), token=settings.METRICS_TOKEN
    )
    if refused is not None:
        response = HttpResponse(metrics_access.REFUSED_TEXT, status=refused, content_type="text/plain")
        response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(generate_latest(HostMetrics()), headers=metrics_access.RESPONSE_HEADERS)


def not_found(request, exception=None):
    if is_client_api_path(request.path):
        # As OpenAI answers a path it does not serve, so a client's SDK reads it.
        return openai_error_response(NotFound(f"Invalid URL ({request.method} {request.path})", code="unknown_url"))
    if is_api_path(request.path):
        return error_response(NotFound("not found"))
    return render(request, "404.html", status=404)


def server_error(request):
    if is_api_path(request.path):
        request_id = getattr(request, "request_id", "-")
        return error_response(ServerFault(f"internal error (request id {request_id})"))
    return HttpResponse("internal error", status=500, content_type="text/plain")
