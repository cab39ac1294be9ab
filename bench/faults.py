"""Faults: mixed `/v1` and dashboard load through the production server while Redis is stopped,
then PostgreSQL refuses connections (stopped), then hangs (its server process stopped with
SIGSTOP), then freezes (every one of its processes stopped with SIGSTOP, the backends serving
open connections included), then while clients send slow bodies (declared and never sent, and
`/v1` bodies declared over V1_MAX_BODY_MB), each for ``--outage`` seconds, with ``--settle``
seconds of normal service before, between and after. The server runs with BODY_READ_TIMEOUT of
:data:`BODY_READ_TIMEOUT` seconds.

    python bench/faults.py [--outage S] [--settle S] [--v1-clients N] [--dashboard-clients N] [--smoke]

It runs on the embedded default it starts itself (refusing DATABASE_URL / REDIS_URL: it stops
and starts those processes, by PID) and an OpenAI-format upstream on 127.0.0.1
(bench/openai_upstream.py). It speaks to the server over HTTP only, and reads the metrics from
`/metrics`' text, so it measures whatever code the server runs. It prints:

- requests by kind and status (a failure to get any answer by its exception's name);
- request log rows against `/v1` calls that resolved their key (every answer but a 401 and a 503
  `database_unavailable`, which the key lookup gives and no row is written for): they should be
  equal;
- the longest answer of each kind for requests started during each outage, and the longest of
  all (none should pass :data:`LONGEST_ALLOWED`);
- the `ragmux_*` counters of `/metrics` just before each outage and after the load, and every
  `*_total` counter that was lower in a sample than in the one before (none may be);
- the `/v1` calls `/metrics` counted (``ragmux_v1_requests_total``, every status but 401) against
  the rows.

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
from harness import BenchEnvironment, answers, print_table, report, started, wait_for

BENCH = Path(__file__).resolve().parent
CHAT_BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something short."}]}
# Generous: an answer slower than this is a hang, and counted as one.
REQUEST_TIMEOUT = 60.0
# What the server is started with: a slow body is let go after this.
BODY_READ_TIMEOUT = 3
# No request of any phase should take longer.
LONGEST_ALLOWED = 5.0
# What a slow client declares and what it sends of it before it goes silent.
SLOW_BODY_DECLARED = 1000
SLOW_BODY_SENT = b'{"messages": '
SLOW = ("slow body", "oversized v1")
KINDS = ("v1", "dashboard", *SLOW)
COUNTER_LINE = re.compile(r"^([a-zA-Z_:][\w:]*_total(?:\{[^}]*\})?)\s+([0-9.eE+-]+)$")


@dataclass(frozen=True)
class Answer:
    kind: str
    started: float  # seconds since the load began
    seconds: float
    outcome: str  # the status, or the exception that stood for one
    code: str = ""  # the error code of a JSON error body


@dataclass(frozen=True)
class Phase:
    name: str
    start: float
    end: float


def counters(text: str) -> dict[str, float]:
    """Every sample of a counter (`*_total`) in a Prometheus text exposition."""
    found = {}
    for line in text.splitlines():
        match = COUNTER_LINE.match(line.strip())
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


async def client_loop(
    kind: str, request, began: float, going_on, answered: list[Answer], *, only_while: threading.Event | None = None
) -> None:
    while going_on():
        if only_while is not None and not only_while.is_set():
            await asyncio.sleep(0.1)
            continue
        started = time.monotonic()
        try:
            response = await request()
            outcome, code = str(response.status_code), error_code(response) if response.status_code >= 400 else ""
        except httpx.HTTPError as exc:
            outcome, code = exc.__class__.__name__, ""
        answered.append(Answer(kind, started - began, time.monotonic() - started, outcome, code))
        if outcome != "200":
            await asyncio.sleep(0.05)  # a client backs off a little; a failing server is not hammered


class _Answer:
    """What :func:`partial_request` got, with the httpx response's two attributes the loop reads."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status_code, self._body = status, body

    def json(self):
        import json

        return json.loads(self._body)


async def partial_request(url: str, headers: dict[str, str], declared: int) -> _Answer:
    """A `/v1` chat call that declares ``declared`` bytes of body, sends the first few and waits
    for the answer."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        writer.write(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{head}"
            f"Content-Length: {declared}\r\n\r\n".encode()
            + SLOW_BODY_SENT
        )
        await writer.drain()
        async with asyncio.timeout(REQUEST_TIMEOUT):
            status_line = await reader.readline()
            if not status_line:
                raise httpx.RemoteProtocolError("closed without an answer")
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            body = await reader.readexactly(length)
    except TimeoutError:
        raise httpx.ReadTimeout("no answer") from None
    finally:
        writer.close()
    return _Answer(int(status_line.split()[1]), body)


async def run_load(
    url: str, key: str, session: dict[str, str], *, clients: dict[str, int], began: float, going_on, slow_bodies
):
    """``clients[kind]`` clients of each kind, each sending one request after another while
    ``going_on()``; the slow-body kinds only while ``slow_bodies`` is set."""
    answered: list[Answer] = []
    async with (
        httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT) as v1,
        httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT, cookies=session) as browser,
    ):
        v1_headers = {"Authorization": f"Bearer {key}"}
        oversized = settings_v1_limit() + 1
        requests = {
            "v1": lambda: v1.post("/v1/chat/completions", json=CHAT_BODY, headers=v1_headers),
            "dashboard": lambda: browser.get("/admin/"),
            "slow body": lambda: partial_request(url, v1_headers, SLOW_BODY_DECLARED),
            "oversized v1": lambda: partial_request(url, v1_headers, oversized),
        }
        await asyncio.gather(
            *(
                client_loop(
                    kind, requests[kind], began, going_on, answered, only_while=slow_bodies if kind in SLOW else None
                )
                for kind, count in clients.items()
                for _ in range(count)
            )
        )
    return answered


def settings_v1_limit() -> int:
    from django.conf import settings

    return settings.V1_MAX_BODY_MB * 1024 * 1024


class Faults:
    """Stops and starts the embedded services, by PID, on a schedule, in a thread of its own."""

    def __init__(self, services, *, outage: float, settle: float, metrics_url: str):
        self.metrics_url = metrics_url
        self.postgres = services.postgres
        self.redis = services.redis
        self.redis_port = int(self.redis.port_file.read_text())
        self.postgres_port = int(self.postgres.port_file.read_text())
        self.outage, self.settle = outage, settle
        self.phases: list[Phase] = []
        # The counters just before each outage, by the outage's name.
        self.samples: dict[str, dict[str, float]] = {}
        # Set once the last service is back: the load goes on for another settle.
        self.done = threading.Event()
        # Set while the slow-body clients send.
        self.slow_bodies = threading.Event()

    def postmaster_pid(self) -> int:
        return int((self.postgres.pgdata / "postmaster.pid").read_text().split()[0])

    def run(self, began: float) -> None:
        try:
            self._outages(began)
        finally:
            self.done.set()

    def _outages(self, began: float) -> None:
        for name, stop, resume in (
            ("redis stopped", self.redis.stop, lambda: self.redis.start(self.redis_port)),
            ("postgres refused", self.postgres.stop, lambda: self.postgres.start(self.postgres_port)),
            ("postgres hung", self._stop_postmaster, self._continue_postgres),
            ("postgres frozen", self._freeze_postgres, self._continue_postgres),
            ("slow bodies", self.slow_bodies.set, self.slow_bodies.clear),
        ):
            time.sleep(self.settle)
            self.samples[f"before {name}"] = counters(httpx.get(self.metrics_url).text)
            start = time.monotonic() - began
            stop()
            time.sleep(self.outage)
            resume()
            self.phases.append(Phase(name, start, time.monotonic() - began))

    def _stop_postmaster(self) -> None:
        self._stopped = [self.postmaster_pid()]
        os.kill(self._stopped[0], signal.SIGSTOP)

    def _freeze_postgres(self) -> None:
        import psutil

        postmaster = psutil.Process(self.postmaster_pid())
        self._stopped = [postmaster.pid, *(child.pid for child in postmaster.children(recursive=True))]
        for pid in self._stopped:
            os.kill(pid, signal.SIGSTOP)

    def _continue_postgres(self) -> None:
        for pid in self._stopped:
            os.kill(pid, signal.SIGCONT)


def dashboard_session(user) -> dict[str, str]:
    """The cookie of a session signed in as ``user``."""
    from django.conf import settings
    from django.test import Client

    browser = Client()
    browser.force_login(user)
    return {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outage", type=float, default=10.0, help="seconds each service is down")
    parser.add_argument("--settle", type=float, default=2.5, help="seconds of normal service around outages")
    parser.add_argument("--v1-clients", type=int, default=6)
    parser.add_argument("--dashboard-clients", type=int, default=2)
    parser.add_argument("--slow-clients", type=int, default=4, help="of each slow-body kind, in its phase")
    parser.add_argument("--smoke", action="store_true", help="short outages, few clients: to check the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.outage, args.settle, args.v1_clients, args.dashboard_clients, args.slow_clients = 2.0, 1.0, 2, 1, 1
    if os.environ.get("DATABASE_URL") or os.environ.get("REDIS_URL"):
        raise SystemExit("faults: runs on the embedded default only (it stops and starts those processes)")

    from ragmux.launch.embedded import free_port

    port, upstream_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    url = f"http://127.0.0.1:{port}"
    with (
        BenchEnvironment(
            settings={
                "PORT": str(port),
                "WEB_WORKERS": "1",
                "LOG_LEVEL": "warning",
                "BODY_READ_TIMEOUT": str(BODY_READ_TIMEOUT),
            }
        ) as environment,
        started(
            [sys.executable, str(BENCH / "openai_upstream.py"), str(upstream_port)],
            lambda: answers(upstream_url),
            "the fake upstream",
        ),
    ):
        from django.contrib.auth import get_user_model
        from django.db import connections

        from gateway.clients.models import RequestLog
        from gateway.clients.services import key_create, project_create
        from gateway.connections.services import connection_create
        from ragmux.launch.processes import web_command

        chat = connection_create(
            name="bench-faults-chat",
            provider_type="custom_openai",
            base_url=f"{upstream_url}/v1",
            model_name="gpt-4o-mini",
            dimensions=None,
            api_key="sk-bench-upstream-000000000000",
        )
        project = project_create(
            name="bench-faults",
            chat_connection_id=chat.id,
            embedding_connection_id=None,
            store_id=None,
            system_prompt="",
        )
        key = key_create(project=project, name="bench", scopes=None, expires_at=None).key
        admin = get_user_model().objects.create_superuser("bench-faults", password="bench-faults-password")
        session = dashboard_session(admin)
        faults = Faults(environment.services, outage=args.outage, settle=args.settle, metrics_url=f"{url}/metrics")
        clients = {
            "v1": args.v1_clients,
            "dashboard": args.dashboard_clients,
            "slow body": args.slow_clients,
            "oversized v1": args.slow_clients,
        }
        with started(
            web_command(),
            lambda: answers(f"{url}/healthz"),
            "the web server",
            env=dict(os.environ),
            stderr=subprocess.DEVNULL,
        ) as server:
            print(
                f"server pid {server.pid}, one worker; postgres pid {faults.postmaster_pid()}; clients {clients}; "
                f"outages of {args.outage:g}s with {args.settle:g}s of service around them",
                flush=True,
            )
            began = time.monotonic()
            schedule = threading.Thread(target=faults.run, args=(began,), name="faults")
            schedule.start()
            stop_at: list[float] = []

            def going_on() -> bool:
                if faults.done.is_set() and not stop_at:
                    stop_at.append(time.monotonic() + args.settle)
                return not stop_at or time.monotonic() < stop_at[0]

            answered = asyncio.run(
                run_load(
                    url, key, session, clients=clients, began=began, going_on=going_on, slow_bodies=faults.slow_bodies
                )
            )
            schedule.join()
            if len(faults.phases) != 5:
                raise SystemExit("faults: the outages did not all happen (see the error above)")
            # This process's own connection did not survive the restart.
            connections.close_all()
            resolved = sum(1 for a in answered if a.kind in ("v1", "oversized v1") and resolves_key(a))
            # The ledger writes its rows within a second of the database being back.
            wait_for(lambda: RequestLog.objects.filter(project=project).count() >= resolved, timeout=30)
            rows = RequestLog.objects.filter(project=project).count()
            time.sleep(2)  # the metrics of the last rows
            samples = {**faults.samples, "after the load": counters(httpx.get(f"{url}/metrics").text)}
        RequestLog.objects.filter(project=project).delete()
        project.delete()
        chat.delete()
        admin.delete()

    print_report(answered, faults.phases, rows, resolved, samples)


def resolves_key(answer: Answer) -> bool:
    """Whether a `/v1` call got past the key lookup (so a row is owed): every answer but a 401 and
    the lookup's own 503. A call without any answer is counted too: the server may have finished it."""
    if answer.kind == "slow body" or (answer.kind == "oversized v1" and answer.outcome != "413"):
        return False  # let go before the key was read; an oversized body's 413 is logged with its key
    return answer.outcome != "401" and not (answer.outcome == "503" and answer.code == "database_unavailable")


def phase_of(answer: Answer, phases: list[Phase]) -> str:
    return next((phase.name for phase in phases if phase.start <= answer.started < phase.end), "service")


def v1_calls_counted(sample: dict[str, float]) -> int:
    return int(
        sum(
            value
            for name, value in sample.items()
            if name.startswith("ragmux_v1_requests_total{") and 'status="401"' not in name
        )
    )


def print_report(answered, phases, rows, resolved, samples: dict[str, dict[str, float]]) -> None:
    by_status = Counter((a.kind, a.outcome, a.code) for a in answered)
    by_phase = Counter((phase_of(a, phases), a.kind, a.outcome, a.code) for a in answered)
    print("\nrequests by status, and by when they started")
    print_table(
        [(kind, outcome, code or "-", count) for (kind, outcome, code), count in sorted(by_status.items())],
        ("kind", "status", "code", "requests"),
    )
    print()
    order = ["service", *(phase.name for phase in phases)]
    print_table(
        [
            (phase, kind, outcome, code or "-", count)
            for (phase, kind, outcome, code), count in sorted(
                by_phase.items(), key=lambda item: (order.index(item[0][0]), item[0][1:])
            )
        ],
        ("started during", "kind", "status", "code", "requests"),
    )
    outside = [a for a in answered if a.outcome != "200" and phase_of(a, phases) == "service"]
    for answer in outside[:10]:
        took = f"started at {answer.started:.2f}s, took {answer.seconds:.2f}s"
        print(f"  outside the outages: {answer.kind} {answer.outcome} {took}")
    verdict = "equal" if rows == resolved else "NOT EQUAL"
    print(f"\nrequest log rows {rows}; /v1 calls that resolved their key {resolved}: {verdict}")
    longest = {}
    for phase in phases:
        for kind in KINDS:
            during = [a.seconds for a in answered if a.kind == kind and phase_of(a, phases) == phase.name]
            longest[f"{phase.name}: {kind}"] = round(max(during, default=0.0), 2)
    print("\nlongest answer of requests started during each outage")
    print_table(
        [(p.name, f"{p.start:.1f}-{p.end:.1f}", *(longest[f"{p.name}: {kind}"] for kind in KINDS)) for p in phases],
        ("outage", "seconds into the load", *(f"{kind} s" for kind in KINDS)),
    )
    slowest = max(answered, key=lambda a: a.seconds)
    over = sum(1 for a in answered if a.seconds > LONGEST_ALLOWED)
    print(
        f"longest of all: {slowest.seconds:.2f}s ({slowest.kind} {slowest.outcome}, started during "
        f"{phase_of(slowest, phases)}); requests over {LONGEST_ALLOWED:g}s: {over}"
    )
    names, taken = list(samples), list(samples.values())
    lower = sorted(
        f"{name} ({names[index]} {earlier[name]:g} -> {names[index + 1]} {later.get(name, 0.0):g})"
        for index, (earlier, later) in enumerate(zip(taken, taken[1:], strict=False))
        for name in earlier
        if later.get(name, 0.0) < earlier[name]
    )
    shown = sorted({name for sample in taken for name in sample if name.startswith("ragmux_")})
    print("\ncounters (ragmux_*; every *_total is compared with the sample before)")
    print_table([(name, *(f"{sample.get(name, 0):g}" for sample in taken)) for name in shown], ("counter", *names))
    print(f"counters lower than in the sample before: {len(lower)}")
    for line in lower:
        print(f"  {line}")
    counted = v1_calls_counted(taken[-1])
    print(f"/v1 calls counted by /metrics {counted}; request log rows {rows}")
    report(
        {
            "bench": "faults",
            "requests": len(answered),
            "by_status": {
                f"{kind} {outcome}{' ' + code if code else ''}": n
                for (kind, outcome, code), n in sorted(by_status.items())
            },
            "request_log_rows": rows,
            "v1_calls_resolving_their_key": resolved,
            "rows_equal_calls": rows == resolved,
            "longest_answer_seconds": longest,
            "longest_of_all_seconds": round(slowest.seconds, 2),
            "requests_over_5s": over,
            "counters_lower": lower,
            "v1_calls_counted_by_metrics": counted,
        }
    )


if __name__ == "__main__":
    main()
