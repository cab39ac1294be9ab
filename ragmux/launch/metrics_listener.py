"""A listener of its own for the metrics: METRICS_LISTEN under `ragmux serve`, or a worker's
(`ragmux worker`). It answers `GET /metrics` only, for the bearer METRICS_TOKEN when one is set
(ragmux.core.metrics_access), from threads of the process that starts it."""

from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.db import connections
from prometheus_client import generate_latest
from prometheus_client.registry import Collector

from ragmux.core import metrics_access


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's signature
        # A scrape every few seconds would fill the log.
        pass


def metrics_app(collector: Collector, token: str | None):
    def app(environ, start_response):
        if environ.get("PATH_INFO") != metrics_access.PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")])
            return [b"method not allowed\n"]
        if metrics_access.refusal(authorization=environ.get("HTTP_AUTHORIZATION", ""), token=token) is not None:
            start_response("401 Unauthorized", [("WWW-Authenticate", "Bearer"), ("Content-Type", "text/plain")])
            return [metrics_access.REFUSED_TEXT.encode()]
        try:
            body = generate_latest(collector)
        finally:
            # The database gauges' connection belongs to this request's thread, which ends here.
            connections.close_all()
        start_response("200 OK", list(metrics_access.RESPONSE_HEADERS.items()))
        return [] if environ["REQUEST_METHOD"] == "HEAD" else [body]

    return app


def start(address: tuple[str, int], collector: Collector, token: str | None) -> WSGIServer:
    """Serves ``collector`` on ``address`` from a thread; raises OSError when it cannot listen."""
    host, port = address
    server_class = _Server6 if ":" in host else _Server
    server = make_server(host, port, metrics_app(collector, token), server_class=server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics-listener", daemon=True).start()
    return server
