from __future__ import annotations

import asyncio
import logging
import time

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import FileResponse, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.decorators import sync_and_async_middleware
from django.utils.deprecation import MiddlewareMixin
from django.utils.functional import SimpleLazyObject
from django_prometheus.middleware import PrometheusAfterMiddleware, PrometheusBeforeMiddleware
from whitenoise.middleware import WhiteNoiseMiddleware

from ragmux.core import logs, proxies
from ragmux.core.audit import requested_from
from ragmux.core.errors import (
    CLIENT_API_PREFIXES,
    CLIENT_CLOSED,
    database_unavailable,
    error_response,
    is_client_api_path,
    openai_error_response,
)

logger = logging.getLogger("ragmux.core.middleware")
access_logger = logging.getLogger("ragmux.access")
API_PREFIXES = ("/admin/api/", *CLIENT_API_PREFIXES)

# Every middleware here works in both modes: under the ASGI server a single sync-only one would
# push each request, streams included, through a thread.


def is_api_path(path: str) -> bool:
    """Under an API prefix, or the prefix itself without its trailing slash (`/admin/api`)."""
    return f"{path}/".startswith(API_PREFIXES)


def _both_modes(get_response, before, after):
    """A middleware calling ``before(request)`` and ``after(request, response)`` around the view,
    sync or async as the chain is."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            before(request)
            return after(request, await get_response(request))

    else:

        def middleware(request):
            before(request)
            return after(request, get_response(request))

    return middleware


def _mark_api_response(request, response):
    if is_api_path(request.path):
        response["Cache-Control"] = "no-store"
    return response


@sync_and_async_middleware
def api_response_headers(get_response):
    """Keeps API answers out of shared caches."""
    return _both_modes(get_response, lambda request: None, _mark_api_response)


def _signed_in_username(request) -> str | None:
    """The user the request was served for, if anything looked them up: the user of a session is
    loaded lazily, and loading it here would cost a query (one refused on the event loop)."""
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject):
        user = getattr(request, "_cached_user", None)
    return user.username if user is not None and user.is_authenticated else None


def _log_access(request, status: int, started: float, context: logs.RequestContext) -> None:
    latency_ms = round((time.monotonic() - started) * 1000, 1)
    match = request.resolver_match
    access_logger.info(
        "%s %s %s %sms",
        request.method,
        request.path,
        status,
        latency_ms,
        extra={
            "request_id": context.request_id,
            "method": request.method,
            "path": request.path,
            "endpoint": match.route if match else None,
            "status": status,
            "latency_ms": latency_ms,
            "user": _signed_in_username(request),
            **context.fields,
        },
    )


def _begin_request(request) -> tuple[logs.RequestContext, float]:
    request.request_id = logs.incoming_or_new_id(request.headers.get("X-Request-Id"))
    return logs.begin(request.request_id), time.monotonic()


def _finish_request(request, response, context: logs.RequestContext, started: float):
    """Echoes the id and logs the access line, for a stream once its last byte is sent (the
    lines it causes meanwhile still carry the id)."""
    response["X-Request-Id"] = context.request_id
    if not response.streaming or isinstance(response, FileResponse):
        _log_access(request, response.status_code, started, context)
        logs.end()
        return response
    content = response.streaming_content

    def finished() -> None:
        _log_access(request, response.status_code, started, context)
        logs.end()

    if response.is_async:

        async def relayed():
            try:
                async for chunk in content:
                    yield chunk
            finally:
                finished()

    else:

        def relayed():
            try:
                yield from content
            finally:
                finished()

    response.streaming_content = relayed()
    return response


@sync_and_async_middleware
def request_context(get_response):
    """Gives every request an id (a plain incoming X-Request-Id, else a new one) that every log
    line it causes carries, answers it in X-Request-Id, and logs one access line per request."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            context, started = _begin_request(request)
            try:
                response = await get_response(request)
            except asyncio.CancelledError:
                # The client went away before the answer started.
                _log_access(request, CLIENT_CLOSED, started, context)
                raise
            return _finish_request(request, response, context, started)

    else:

        def middleware(request):
            context, started = _begin_request(request)
            return _finish_request(request, get_response(request), context, started)

    return middleware


def _forget_untrusted_proxy_headers(request) -> None:
    if not proxies.proxy_headers_believed(request):
        request.META.pop("HTTP_X_FORWARDED_PROTO", None)


@sync_and_async_middleware
def untrusted_proxy_headers(get_response):
    """Drops X-Forwarded-Proto from a peer outside TRUSTED_PROXY_CIDRS before Django's https
    check (SECURE_PROXY_SSL_HEADER, which believes it from anyone) can read it."""
    return _both_modes(get_response, _forget_untrusted_proxy_headers, lambda request, response: response)


@sync_and_async_middleware
def audit_client_address(get_response):
    """Every audit row a request causes records the client's address, whichever service writes
    it. Set around the view, not before it: the next request handled by this thread or task
    starts without it."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            with requested_from(proxies.client_address(request)):
                return await get_response(request)

    else:

        def middleware(request):
            with requested_from(proxies.client_address(request)):
                return get_response(request)

    return middleware


def _secure_cookies(request, response):
    if request.is_secure():
        for morsel in response.cookies.values():
            morsel["secure"] = True
    return response


@sync_and_async_middleware
def secure_cookies_over_https(get_response):
    """Marks every cookie `Secure` on an https request, including one a trusted proxy reports
    through X-Forwarded-Proto: Django only applies the fixed SESSION_COOKIE_SECURE setting."""
    return _both_modes(get_response, lambda request: None, _secure_cookies)


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, which is sync-only, made usable in async mode: files are looked up in a
    thread, and only for paths under the static prefix."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        super().__init__(get_response)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return super().__call__(request)

    def _static_file(self, path: str):
        return self.find_file(path) if self.autorefresh else self.files.get(path)

    async def _acall(self, request):
        if request.path_info.startswith(self.static_prefix):
            static_file = await sync_to_async(self._static_file, thread_sensitive=False)(request.path_info)
            if static_file is not None:
                return self.serve(static_file, request)
        return await self.get_response(request)


class DatabaseUnavailableAnswer(MiddlewareMixin):
    """A view that could not reach PostgreSQL answers 503 `database_unavailable` with
    `Retry-After`, in its path's envelope (a plain page for the dashboard), instead of a 500
    with a traceback. DRF's views say it through ``api_exception_handler``; this catches the rest.
    """

    def process_exception(self, request, exception):
        refusal = database_unavailable(exception)
        if refusal is None:
            return None
        logger.warning("database unavailable for %s %s: %s", request.method, request.path, exception)
        if is_client_api_path(request.path):
            return openai_error_response(refusal)
        if is_api_path(request.path):
            return error_response(refusal)
        response = HttpResponse(refusal.message, status=503, content_type="text/plain")
        response["Retry-After"] = str(refusal.retry_after)
        return response


class _InlineForClientApi:
    """Runs a Django middleware's hooks on the event loop for `/v1` calls.

    In async mode Django runs each ``process_request``, ``process_view`` and
    ``process_response`` in a thread (one hop each, about twenty per request for the list in
    settings), because they may block on the session's or the user's database rows. The `/v1`
    views are async and never touch the session, the user or messages, so for them these hooks
    are plain computation and the hops pure overhead. Every other path keeps Django's behaviour.

    A middleware whose ``for_client_api`` is False is passed over entirely for `/v1`: sessions,
    users, messages and CSRF cookies mean nothing to a call authenticated by its key (the views
    are CSRF-exempt), and setting them up was work on every call.
    """

    for_client_api = True

    def __init__(self, get_response):
        super().__init__(get_response)
        if self.async_mode and hasattr(self, "process_view"):
            # Django adapts a sync process_view to a thread hop when it builds the chain; a
            # coroutine in its place is called as it is.
            self.process_view = self._process_view_async

    async def _process_view_async(self, request, view_func, view_args, view_kwargs):
        hook = super().process_view
        if is_client_api_path(request.path):
            return hook(request, view_func, view_args, view_kwargs)
        return await sync_to_async(hook, thread_sensitive=True)(request, view_func, view_args, view_kwargs)

    async def __acall__(self, request):
        if not is_client_api_path(request.path):
            return await super().__acall__(request)
        if not self.for_client_api:
            return await self.get_response(request)
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class PrometheusBefore(_InlineForClientApi, PrometheusBeforeMiddleware):
    pass


class Security(_InlineForClientApi, SecurityMiddleware):
    pass


class Session(_InlineForClientApi, SessionMiddleware):
    for_client_api = False


# The health probes, which `ragmux serve`, `ragmux healthcheck` and orchestrators send by address
# (127.0.0.1, a pod's IP), under no host name ALLOWED_HOSTS would list.
PROBE_PATHS = frozenset({"/healthz", "/readyz"})


class Common(_InlineForClientApi, CommonMiddleware):
    def process_request(self, request):
        # Host validation lives here; a probe reveals nothing a host name would guard.
        if request.path in PROBE_PATHS:
            return None
        return super().process_request(request)


class Csrf(_InlineForClientApi, CsrfViewMiddleware):
    for_client_api = False


class Authentication(_InlineForClientApi, AuthenticationMiddleware):
    for_client_api = False


class Messages(_InlineForClientApi, MessageMiddleware):
    for_client_api = False


class XFrameOptions(_InlineForClientApi, XFrameOptionsMiddleware):
    pass


class PrometheusAfter(_InlineForClientApi, PrometheusAfterMiddleware):
    pass
