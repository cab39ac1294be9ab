"""The health probes, the metrics page and the error pages every route shares."""

from __future__ import annotations

from functools import wraps

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ragmux.core import metrics as process_metrics
from ragmux.core.errors import MethodNotAllowed, NotFound, ServerFault, error_response
from ragmux.core.middleware import is_api_path
from stores.metrics import DatabaseGaugesCollector


def probe(view):
    """Probes only read: GET and HEAD. Anything else gets a JSON 405 rather than Django's CSRF
    page, which a probe has no cookie to pass anyway."""

    @csrf_exempt
    @wraps(view)
    def wrapper(request):
        if request.method not in ("GET", "HEAD"):
            response = error_response(MethodNotAllowed("method not allowed: probes take GET or HEAD"))
            response["Allow"] = "GET, HEAD"
            return response
        return view(request)

    return wrapper


@probe
def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


@probe
def readyz(request):
    from ragmux.celery import app as celery_app

    problems = []
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        problems.append(f"database: {exc.__class__.__name__}")
    try:
        with celery_app.connection_for_write() as broker:
            broker.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"broker: {exc.__class__.__name__}")
    if problems:
        return JsonResponse({"ready": False, "problems": problems}, status=503)
    return JsonResponse({"ready": True})


class _Scrape:
    """What `/metrics` serves: this host's processes and the database's gauges."""

    def collect(self):
        yield from process_metrics.this_host().collect()
        yield from DatabaseGaugesCollector().collect()


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
