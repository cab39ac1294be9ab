"""Gateway overhead: `/v1/chat/completions` through the production server (uvicorn, one web
worker) against calling the same upstream directly.

    python bench/gateway.py [--requests N] [--seconds S] [--smoke]

The upstream is the suite's fake OpenAI-format server on 127.0.0.1 (answers at once), in a
process of its own, so the differences are what the gateway adds: key lookup, request log,
JSON or SSE relay. The project has no store (retrieval is measured by bench/search_latency.py).
Measured: added p50 / p95 latency of JSON calls, added time to first byte of streamed calls,
requests per second with 50 concurrent clients, and 100 concurrent streams (complete, failed by
reason, first-byte p95). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from harness import REPO, BenchEnvironment, percentile, print_table, report, wait_for

BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something short."}]}
CLIENTS = 50
STREAMS = 100


async def json_latencies(client: httpx.AsyncClient, url: str, headers: dict, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        response = await client.post(url, json=BODY, headers=headers)
        response.raise_for_status()
        timings.append((time.perf_counter() - started) * 1000)
    return timings


async def first_byte(client: httpx.AsyncClient, url: str, headers: dict) -> float:
    started = time.perf_counter()
    async with client.stream("POST", url, json={**BODY, "stream": True}, headers=headers) as response:
        response.raise_for_status()
        ttfb = None
        async for _ in response.aiter_bytes():
            if ttfb is None:
                ttfb = (time.perf_counter() - started) * 1000
    return ttfb


async def throughput(client: httpx.AsyncClient, url: str, headers: dict, seconds: float) -> tuple[float, Counter]:
    """Requests per second of 50 clients, and the failed calls by reason."""
    done, failed = 0, Counter()
    deadline = time.perf_counter() + seconds

    async def one_client():
        nonlocal done
        while time.perf_counter() < deadline:
            try:
                response = await client.post(url, json=BODY, headers=headers)
            except httpx.TransportError as exc:
                failed[type(exc).__name__] += 1
                continue
            if response.status_code == 200:
                done += 1
            else:
                failed[f"HTTP {response.status_code}"] += 1

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(CLIENTS)))
    return done / (time.perf_counter() - started), failed


async def concurrent_streams(client: httpx.AsyncClient, url: str, headers: dict) -> dict:
    """100 streams at once: how many ended complete, why the others did not, and their first bytes."""
    first_bytes: list[float] = []

    async def one() -> str:
        started = time.perf_counter()
        async with client.stream("POST", url, json={**BODY, "stream": True}, headers=headers) as response:
            parts = []
            async for part in response.aiter_bytes():
                if not parts:
                    first_bytes.append((time.perf_counter() - started) * 1000)
                parts.append(part)
            if response.status_code != 200:
                return f"HTTP {response.status_code}"
            return "ok" if b"".join(parts).endswith(b"data: [DONE]\n\n") else "incomplete"

    started = time.perf_counter()
    outcomes = await asyncio.gather(*(one() for _ in range(STREAMS)), return_exceptions=True)
    kinds = Counter(outcome if isinstance(outcome, str) else type(outcome).__name__ for outcome in outcomes)
    return {
        "streams_ok": kinds.pop("ok", 0),
        "streams_errors": dict(kinds),
        "streams_seconds": time.perf_counter() - started,
        "streams_ttfb_p95_ms": percentile(first_bytes, 95) if first_bytes else float("nan"),
    }


async def measure(direct: str, gateway: str, key: str, upstream_key: str, requests: int, seconds: float) -> dict:
    limits = httpx.Limits(max_connections=STREAMS + CLIENTS, max_keepalive_connections=STREAMS + CLIENTS)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        targets = {
            "direct": (direct, {"Authorization": f"Bearer {upstream_key}"}),
            "gateway": (gateway, {"Authorization": f"Bearer {key}"}),
        }
        results: dict[str, dict] = {}
        for name, (url, headers) in targets.items():
            await json_latencies(client, url, headers, 10)  # warm-up: connections, imports, caches
            latencies = await json_latencies(client, url, headers, requests)
            ttfbs = [await first_byte(client, url, headers) for _ in range(requests // 2 or 1)]
            rate, failed = await throughput(client, url, headers, seconds)
            streams = await concurrent_streams(client, url, headers)
            results[name] = {
                "p50_ms": percentile(latencies, 50),
                "p95_ms": percentile(latencies, 95),
                "ttfb_p50_ms": percentile(ttfbs, 50),
                "requests_per_second": rate,
                "failed": failed.total(),
                "failures": dict(failed),
                **streams,
            }
        return results


def _serve_upstream(urls, stop) -> None:
    from tests.fakes.upstream import FakeUpstream

    upstream = FakeUpstream().start()
    urls.send(upstream.url)
    stop.wait()
    upstream.stop()


@contextmanager
def upstream_process() -> Iterator[str]:
    """The fake upstream in a process of its own: in the load generator's process it shared one
    interpreter lock with 150 client connections, and its own stalls showed up as the gateway's."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    stop = context.Event()
    process = context.Process(target=_serve_upstream, args=(sender, stop), daemon=True)
    process.start()
    try:
        if not receiver.poll(60):
            raise SystemExit("the fake upstream did not start")
        yield receiver.recv()
    finally:
        stop.set()
        process.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="sequential calls per latency measurement")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of the 50-client throughput run")
    parser.add_argument("--smoke", action="store_true", help="a few calls of each kind, to check the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.seconds = 10, 1.0

    from ragmux.embedded import free_port

    port = free_port()
    with (
        BenchEnvironment(settings={"PORT": str(port), "WEB_WORKERS": "1", "LOG_LEVEL": "warning"}),
        upstream_process() as upstream_url,
    ):
        from gateway.clients.models import Project
        from gateway.clients.services import key_create, project_create
        from gateway.connections.services import connection_create
        from ragmux.cli import web_command

        upstream_key = "sk-bench-upstream-000000000000"
        connection = connection_create(
            name=f"bench-chat-{port}",
            provider_type="custom_openai",
            base_url=f"{upstream_url}/v1",
            model_name="gpt-4o-mini",
            dimensions=None,
            api_key=upstream_key,
        )
        Project.objects.filter(name="bench-gateway").delete()
        project = project_create(
            name="bench-gateway",
            chat_connection_id=connection.id,
            embedding_connection_id=None,
            store_id=None,
            system_prompt="",
        )
        key = key_create(project=project, name="bench", scopes=None, expires_at=None).key
        server = subprocess.Popen(web_command(), cwd=REPO, env=dict(os.environ), stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            if not wait_for(lambda: _up(base), timeout=60, poll=0.2):
                raise SystemExit("the web server did not start")
            results = asyncio.run(
                measure(
                    f"{upstream_url}/v1/chat/completions",
                    f"{base}/v1/chat/completions",
                    key,
                    upstream_key,
                    args.requests,
                    args.seconds,
                )
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
            project.delete()
            connection.delete()

    direct, gateway = results["direct"], results["gateway"]
    rows = [
        (metric, f"{direct[metric]:.2f}", f"{gateway[metric]:.2f}", f"{gateway[metric] - direct[metric]:+.2f}")
        for metric in (
            "p50_ms",
            "p95_ms",
            "ttfb_p50_ms",
            "requests_per_second",
            "streams_seconds",
            "streams_ttfb_p95_ms",
        )
    ]
    rows.append(("streams_ok", direct["streams_ok"], gateway["streams_ok"], ""))
    rows.append(("streams_errors", str(direct["streams_errors"] or "-"), str(gateway["streams_errors"] or "-"), ""))
    rows.append(("failed (throughput)", direct["failed"], gateway["failed"], ""))
    rows.append(("failures (throughput)", str(direct["failures"] or "-"), str(gateway["failures"] or "-"), ""))
    print_table(rows, ("metric", "direct", "gateway", "added"))
    report(
        {
            "bench": "gateway",
            "requests": args.requests,
            "throughput_seconds": args.seconds,
            "clients": CLIENTS,
            "streams": STREAMS,
            "added_p50_ms": round(gateway["p50_ms"] - direct["p50_ms"], 2),
            "added_p95_ms": round(gateway["p95_ms"] - direct["p95_ms"], 2),
            "added_ttfb_p50_ms": round(gateway["ttfb_p50_ms"] - direct["ttfb_p50_ms"], 2),
            "gateway_requests_per_second": round(gateway["requests_per_second"], 1),
            "direct_requests_per_second": round(direct["requests_per_second"], 1),
            "gateway_failed": gateway["failed"],
            "gateway_failures": gateway["failures"],
            "gateway_streams_ok": gateway["streams_ok"],
            "gateway_streams_errors": gateway["streams_errors"],
            "gateway_streams_seconds": round(gateway["streams_seconds"], 2),
            "gateway_streams_ttfb_p95_ms": round(gateway["streams_ttfb_p95_ms"], 2),
            "direct_streams_ttfb_p95_ms": round(direct["streams_ttfb_p95_ms"], 2),
        }
    )


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    main()
