"""What several test modules share and is not a fixture: the admin API's client, the provider
translation's feeders, the gateway's planted fact and log wait, the dashboard's page helpers,
the BM25 reference and the API's route tables. Test modules import from here, never from
one another."""

from __future__ import annotations

import base64
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import psutil

# Models and Django's test clients are imported inside the functions, so that importing this
# module needs no Django set-up (as `tests/fixtures.py`, loaded before it, needs none).


class APIClientTransport(httpx.BaseTransport):
    """Hands httpx's requests to DRF's ``APIClient`` inside the test's own transaction.

    The admin-API tests speak httpx, as a client of the API does; under them Django's test
    handler runs the request in this thread, on the test's connection, so nothing has to be
    committed and no server started (the live server stays for `/v1` and the browser). Not
    httpx's own WSGI transport: Django's plain handler closes the database connection at the
    end of each request, and with it the test's transaction. The cookie jar is httpx's: the
    ``APIClient`` forgets the cookies a response set."""

    def __init__(self) -> None:
        from rest_framework.test import APIClient

        # As a browser is: a session-authenticated write without its CSRF token is refused.
        self.client = APIClient(enforce_csrf_checks=True)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {name: value for name, value in request.headers.items() if name.lower() != "content-type"}
        path = request.url.raw_path.decode("ascii")
        response = self.client.generic(
            request.method,
            path,
            data=request.read(),
            content_type=request.headers.get("content-type", ""),
            headers=headers,
        )
        self.client.cookies = SimpleCookie()
        content = b"".join(response.streaming_content) if response.streaming else response.content
        set_cookies = [("set-cookie", morsel.OutputString()) for morsel in response.cookies.values()]
        return httpx.Response(
            response.status_code, headers=[*response.items(), *set_cookies], content=content, request=request
        )


def api_client(*, headers: dict[str, str] | None = None) -> httpx.Client:
    """An httpx client answered by the app in this process through :class:`APIClientTransport`."""
    return httpx.Client(transport=APIClientTransport(), base_url="http://testserver", headers=headers or {})


# --- metrics (off by default: the `metrics_on` fixture, or METRICS_ENV for a process) -----------

METRICS_TOKEN = "the-suite-metrics-token"
METRICS_AUTHORIZATION = {"Authorization": f"Bearer {METRICS_TOKEN}"}
METRICS_ENV = {"METRICS_ENABLED": "true", "METRICS_TOKEN": METRICS_TOKEN}


def scrape(target: httpx.Client | str) -> str:
    """The metrics text served at ``target`` (a client, or a base URL) for the suite's token."""
    if isinstance(target, httpx.Client):
        response = target.get("/metrics", headers=METRICS_AUTHORIZATION)
    else:
        response = httpx.get(f"{target}/metrics", headers=METRICS_AUTHORIZATION, timeout=10)
    assert response.status_code == 200, response.text
    return response.text


def counted(name: str, **labels: str) -> float:
    """A sample of this process's metrics (the suite keeps them in memory), 0 before its first."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def translated_stream(provider, wire: bytes, *, piece: int = 7) -> list[dict]:
    """The OpenAI chunks a chat adapter makes of a streamed upstream body, fed to it in small
    pieces so that no event arrives whole."""
    import asyncio

    async def body():
        for start in range(0, len(wire), piece):
            yield wire[start : start + piece]

    async def collect():
        return [chunk async for chunk in provider._chunks(body())]

    return off_the_main_thread(asyncio.run, collect())


def off_the_main_thread(function, *args):
    """``function(*args)`` in a thread of its own: once the browser tests ran, Playwright's sync
    API keeps an event loop running in the suite's main thread, where ``asyncio.run`` and
    ``async_to_sync`` (the test client calling an async view) refuse to start."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result()


def in_thread(call) -> tuple[threading.Thread, dict]:
    """Starts ``call()`` in a thread with database connections of its own; the dict gets its
    "value" or its "error" once it ends."""
    from django.db import connections

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # reported by the test's assertion, not lost in the thread
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def chunked(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """The body in pieces, as httpx sends an iterator: chunked, without a `Content-Length`."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def sse(*events: object) -> bytes:
    """A server-sent event stream of these JSON payloads (a string is sent as it is)."""
    import json

    return b"".join(f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode() for event in events)


def client_error(error) -> tuple[int, str, str | None]:
    """What a failed chat call tells the client: its status, OpenAI error type and code."""
    from ragmux.core.errors import openai_type_of, status_for

    return status_for(error), openai_type_of(error), error.code


# --- the gateway --------------------------------------------------------------------------------

PLANTED_FACT = "The launch code for Project Falcon is AMBER-7731."
SYSTEM_PROMPT = "You are the Falcon support assistant."


def wait_for_logs(count: int, **filters):
    """Request log rows are written just after the response; give them a moment. The ledger's
    thread settles the usage counters just after it writes a batch's rows, so once the rows are
    there this also waits for that (a server in this process; one in another settles alone)."""
    from gateway.clients import ledger
    from gateway.clients.models import RequestLog

    deadline = time.monotonic() + 5
    while True:
        rows = list(RequestLog.objects.filter(**filters).order_by("id"))
        if len(rows) >= count or time.monotonic() > deadline:
            ledger.flush(max(deadline - time.monotonic(), 0.5))
            return rows
        time.sleep(0.02)


# --- start-up -----------------------------------------------------------------------------------


@dataclass
class WebProcess:
    url: str
    process: subprocess.Popen


@contextmanager
def web_process(env: dict[str, str], *, log_path: Path | None = None) -> Iterator[WebProcess]:
    """The production server (`ragmux serve`'s uvicorn command, on ``settings.PORT`` with
    ``settings.WEB_WORKERS``) in its own process with ``env``, once it answers `/healthz`; its
    log goes to ``log_path`` when given."""
    import pytest
    from django.conf import settings

    from ragmux.launch.processes import web_command

    # A file, not a pipe: a server logging more than a pipe holds would block on it.
    with open(log_path, "w+b") if log_path else tempfile.TemporaryFile() as log:
        process = subprocess.Popen(web_command(), env=env, stdout=subprocess.DEVNULL, stderr=log)
        url = f"http://127.0.0.1:{settings.PORT}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                log.seek(0)
                pytest.fail(f"the web process did not start: {log.read().decode()[-2000:]}")
            time.sleep(0.1)
        try:
            yield WebProcess(url, process)
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)


def partial_request(url: str, head: str, body: bytes = b"", *, wait: float = 10) -> tuple[float, int | None, bytes]:
    """Sends ``head`` (a request line and headers, without the blank line) and ``body`` to the
    server at ``url`` over a socket of its own, and nothing more, as a client that declares a
    body and never sends it all; returns how long the answer took, its status (None when none
    came within ``wait`` seconds) and its bytes."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as client:
        started = time.monotonic()
        client.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer or not answer.endswith((b"}", b"}\n")):
                chunk = client.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else None
    return time.monotonic() - started, status, answer


def run_ragmux(env: dict, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragmux.launch.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- worker processes ---------------------------------------------------------------------------


class Processes:
    """`ragmux worker` / `ragmux scheduler` subprocesses, stopped (whole trees) at the end."""

    def __init__(self, env):
        self.env = env
        self.started: list[subprocess.Popen] = []

    def start(self, command: str, *, output: Path | None = None) -> subprocess.Popen:
        with open(output or os.devnull, "a") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "ragmux.launch.cli", command],
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(process)
        return process

    @staticmethod
    def kill_tree(process: subprocess.Popen) -> None:
        try:
            tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for member in tree:
            try:
                member.kill()
            except psutil.NoSuchProcess:
                pass
        process.wait(timeout=10)

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill_tree(process)


def settled(read, *, within: float):
    """``read()`` as soon as it is empty, else its last value after ``within`` seconds: for what
    goes a moment after the call that ends it (a process's children), without always waiting
    the whole moment."""
    deadline = time.monotonic() + within
    while (value := read()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def wait_until(condition, timeout=90, message="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {message}")


def worker_pid_of(request, upstream) -> int:
    """The process on the client side of `request`'s connection to `upstream`.

    The kernel hands out one ephemeral port to several connections with different far ends, so
    the local port alone can also name this test's own connection to PostgreSQL or Redis; the
    far end and the pid narrow it to the worker (a match on the port alone once killed pytest).
    """
    upstream_port = int(upstream.url.rsplit(":", 1)[1])
    return next(
        c.pid
        for c in psutil.net_connections("tcp")
        if c.laddr
        and c.laddr.port == request.client_port
        and c.raddr
        and c.raddr.port == upstream_port
        and c.pid
        and c.pid != os.getpid()
    )


# --- the dashboard ------------------------------------------------------------------------------

WIDE = {"width": 1440, "height": 900}
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def text(response) -> str:
    """A page's words, without its markup."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split())


def csrf_token(client) -> str:
    """The token of the client's own session, as any page of it carries (the sign-out form)."""
    page = client.get("/admin/").content.decode()
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


def post(client, url: str, data: dict | None = None, **extra):
    """A form's post as its page sends it: with the session's CSRF token and a fresh one-time
    token (ragmux.dashboard.once; forms without one ignore it)."""
    fresh = {"csrfmiddlewaretoken": csrf_token(client), "once": secrets.token_urlsafe(16)}
    return client.post(url, {**fresh, **(data or {})}, **extra)


def drop_files(page, selector: str, files: dict[str, tuple[bytes, str]]) -> None:
    """Drops files (name → (bytes, MIME type)) on an element the way a file manager does: a
    `drop` event carrying them."""
    carried = [
        {"name": name, "type": mime, "data": base64.b64encode(data).decode()} for name, (data, mime) in files.items()
    ]
    transfer = page.evaluate_handle(
        """(files) => {
            const transfer = new DataTransfer();
            for (const file of files) {
                const bytes = Uint8Array.from(atob(file.data), (c) => c.charCodeAt(0));
                transfer.items.add(new File([bytes], file.name, { type: file.type }));
            }
            return transfer;
        }""",
        carried,
    )
    page.dispatch_event(selector, "dragover", {"dataTransfer": transfer})
    page.dispatch_event(selector, "drop", {"dataTransfer": transfer})


def sign_in(page, username, password):
    page.goto("/admin/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


# --- BM25, as the reference implementation scores it ------------------------------------------


def chunk_tokens(store) -> tuple[list[int], list[list[str]]]:
    """Each chunk's lexemes, repeated as often as they occur: the tokens we index."""
    from django.db import connection

    from stores.models import Chunk

    ids, tokens = [], []
    with connection.cursor() as cursor:
        for chunk_id in Chunk.objects.filter(store=store).order_by("id").values_list("id", flat=True):
            cursor.execute(
                "SELECT lexeme, array_length(positions, 1) FROM unnest((SELECT tsv FROM chunks WHERE id = %s))",
                [chunk_id],
            )
            ids.append(chunk_id)
            tokens.append([lexeme for lexeme, count in cursor.fetchall() for _ in range(count)])
    return ids, tokens


def query_tokens(query: str, config: str) -> list[str]:
    """The query's lexemes as BM25 scores them: each as often as the query holds it."""
    from retrieval.sql import query_lexemes

    return query_lexemes(query, config)


def matching_chunks(store, query: str) -> set[int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM chunks WHERE store_id = %s AND tsv @@ websearch_to_tsquery(%s::regconfig, %s)",
            [store.pk, store.query_config, query],
        )
        return {row[0] for row in cursor.fetchall()}


def expected_top(store, query: str, limit: int) -> list[tuple[int, float]]:
    import bm25s

    from retrieval.ranking import phrase_and_exclusion_filter, positive_text

    ids, tokens = chunk_tokens(store)
    reference = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    reference.index(tokens, show_progress=False)
    scores = reference.get_scores(query_tokens(positive_text(query), store.query_config))
    phrase_filter = phrase_and_exclusion_filter(query)
    allowed = matching_chunks(store, phrase_filter) if phrase_filter else set(ids)
    ranked = sorted(
        ((chunk_id, score) for chunk_id, score in zip(ids, scores, strict=True) if score > 0 and chunk_id in allowed),
        key=lambda pair: (-round(pair[1], 9), pair[0]),
    )
    return ranked[:limit]


# --- the API's routes ---------------------------------------------------------------------------

API_METHODS = ("get", "post", "put", "patch", "delete")


def url_routes(patterns=None, prefix: str = "") -> list[tuple[str, object]]:
    """Every route in the URLconf, with its view."""
    from django.urls import URLPattern, URLResolver, get_resolver

    routes = []
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes.extend(url_routes(entry.url_patterns, route))
        elif isinstance(entry, URLPattern):
            routes.append((route, entry.callback))
    return routes


def api_routes() -> list[tuple[str, type]]:
    """Every admin API route in the URLconf, with its view class."""
    return [
        (route, view.view_class)
        for route, view in url_routes()
        if route.startswith("admin/api/") and getattr(view, "view_class", None) is not None
    ]


def client_api_routes() -> list[str]:
    """Every `/v1` and `/v2` route in the URLconf."""
    return [route for route, _ in url_routes() if route.startswith(("v1/", "v2/"))]


def served_methods(view_class: type) -> list[str]:
    return [method for method in API_METHODS if hasattr(view_class, method)]


def forget_cooldowns() -> None:
    """Route targets cool in the process and in the suite's Redis; one test's must not leak."""
    import redis
    from django.conf import settings

    from gateway.connections import cooldowns

    cooldowns.local.clear()
    with redis.Redis.from_url(settings.REDIS_URL) as client:
        keys = list(client.scan_iter(f"{cooldowns.PREFIX}:*"))
        if keys:
            client.delete(*keys)
