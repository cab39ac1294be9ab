"""Gateway overhead: `/v1/chat/completions` through the production server (uvicorn, one web
worker) against calling the same upstream directly.

    python bench/gateway.py [--requests N] [--seconds S] [--chunks C] [--smoke]
                            [--targets gateway,gateway_rag,...,gateway_responses] [--phases latency,ttfb,...]

Three processes besides the server: the upstream (bench/openai_upstream.py, an asyncio
OpenAI-format server on 127.0.0.1 that answers at once), the load generator
(bench/loadgen.py, a raw asyncio HTTP/1.1 client), and this script, which sets up and reports.
The differences between the direct and the gateway figures are what the gateway adds: the key
check, the request log, the JSON or SSE relay. Measured, direct and through the gateway: p50
and p95 of sequential JSON calls, time to first byte of sequential streamed calls, requests
per second with 50 clients, and 100 streams at once (complete, failed by reason, first-byte
p95). A third target, a project whose store holds a 10k-chunk synthetic store (filled through
stores.index's writer, as bench/search_latency.py does, and embedded by the fake upstream),
adds the cost of retrieval: reported, no target. A fourth, a project and key with every rate
limit and budget configured (tokens and dollars, none reached), adds the cost of the limits'
admission, held to the gateway's targets. A fifth, a project whose chat is a route whose first
target is cooling down (put there before the run, as a 429 with a long `Retry-After` would),
adds the route's cost: its target's lookup, the cooldown read from Redis, the skip, and the
attempt's record; held to the same 5 ms. A sixth asks the same chat through `/v1/responses`
(translated, answered, translated back and stored): latency and throughput only (its stream has
no `[DONE]` for the load generator), held to the same 5 ms. ``--targets`` and ``--phases`` run fewer of them
(direct always runs: the other targets are measured against it), to compare two versions of one
target in more, shorter runs; the figures and targets of what did not run are left out. Last
line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
from harness import BenchEnvironment, answers, fresh_store, print_table, report, started

from retrieval.evaluation.scores import percentile

BENCH = Path(__file__).resolve().parent
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something short."}]}
CLIENTS = 50
STREAMS = 100
RAG_CHUNKS = 10_000
RAG_QUERY_WORDS = 6
GATEWAY_TARGETS = ("gateway", "gateway_rag", "gateway_limits", "gateway_route", "gateway_responses")
# The responses target's request: the same chat asked in the Responses API's shape (and stored,
# as OpenAI's default is).
RESPONSES_BODY = {"model": "bench", "input": "Say something short."}
PHASES = ("latency", "ttfb", "throughput", "streams")
TARGETS = {"added_p50_ms": 5.0, "added_ttfb_p50_ms": 5.0, "requests_per_second": 200.0, "streams_ttfb_p95_ms": 500.0}
# Every limit of the limited target, on its project and on its key: far above what a run spends.
EVERY_LIMIT = {
    "rate_limit_rpm": 10**9,
    "rate_limit_tpm": 10**9,
    "budget_daily_tokens": 10**12,
    "budget_monthly_tokens": 10**12,
    "budget_daily_usd_micros": 10**12,
    "budget_monthly_usd_micros": 10**12,
}


def rag_store(connection, chunks: int, seed: int):
    """A store of ``chunks`` synthetic chunks embedded by the fake upstream's model, and a query
    of words from its vocabulary."""
    from search_latency import (
        CHUNKS_PER_CLUSTER,
        VOCABULARY,
        WORDS_PER_CHUNK,
        ZIPF_EXPONENT,
        clustered_vectors,
        fill_store,
        pseudo_words,
        synthetic_texts,
        zipf_cdf,
    )

    rng = np.random.default_rng(seed)
    words = np.array(pseudo_words(VOCABULARY))
    cdf = zipf_cdf(VOCABULARY, ZIPF_EXPONENT)
    texts = synthetic_texts(rng, words, cdf, chunks, WORDS_PER_CHUNK)
    vectors = clustered_vectors(rng, chunks, max(1, round(chunks / CHUNKS_PER_CLUSTER)))
    store = fresh_store("bench-gateway-rag", connection)
    fill_store(store, texts, vectors)
    return store, synthetic_texts(rng, words, cdf, 1, (RAG_QUERY_WORDS, RAG_QUERY_WORDS))[0]


def cooling_route(name: str, connections: list):
    """An ordered chat route over ``connections`` whose first target is cooling down for the
    whole run, in the Redis the server reads."""
    from gateway.connections import cooldowns
    from gateway.connections.route_services import TargetSpec, route_create

    route = route_create(
        name=name, kind="chat", strategy="ordered", targets=[TargetSpec(connection.id) for connection in connections]
    )
    first = connections[0]
    asyncio.run(cooldowns.failed(cooldowns.target_key(first.pk, first.model_name), retry_after=3600))
    return route


def server_setup(command: list[str]) -> str:
    # uvicorn's "auto" picks these when they are installed, and they are dependencies.
    import httptools
    import uvloop
    from django.conf import settings

    return (
        f"server: {' '.join(command[1:])}\n"
        f"  one worker; loop uvloop {uvloop.__version__}, http httptools {httptools.__version__}; "
        f"WEB_DB_POOL_SIZE {settings.WEB_DB_POOL_SIZE}; Python {platform.python_version()}; "
        f"{os.cpu_count()} cores"
    )


def postmaster_pid() -> int:
    """The database server's main process (its backends are its children)."""
    import psutil
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return psutil.Process(cursor.fetchone()[0]).parent().pid


def summary(result: dict) -> dict:
    out = {}
    if "latency_ms" in result:
        out["p50_ms"] = percentile(result["latency_ms"], 50)
        out["p95_ms"] = percentile(result["latency_ms"], 95)
    if "ttfb_ms" in result:
        out["ttfb_p50_ms"] = percentile(result["ttfb_ms"], 50)
    for name in (
        "requests_per_second",
        "server_cpu_ms_per_call",
        "database_cpu_ms_per_call",
        "failed",
        "failures",
        "streams_ok",
        "streams_errors",
        "streams_seconds",
    ):
        if name in result:
            out[name] = result[name]
    if result.get("streams_first_byte_ms"):
        out["streams_ttfb_p95_ms"] = percentile(result["streams_first_byte_ms"], 95)
    return out


def names_of(allowed: tuple[str, ...]):
    """An argparse type: a comma-separated choice among ``allowed``, in their order."""

    def parse(text: str) -> tuple[str, ...]:
        names = {name.strip() for name in text.split(",") if name.strip()}
        if not names or not names <= set(allowed):
            raise argparse.ArgumentTypeError(f"a comma-separated choice of {', '.join(allowed)}")
        return tuple(name for name in allowed if name in names)

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="sequential calls per latency measurement")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each 50-client throughput run")
    parser.add_argument("--chunks", type=int, default=RAG_CHUNKS, help="chunks in the RAG target's store")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--smoke", action="store_true", help="a few calls of each kind, to check the script runs")
    parser.add_argument(
        "--targets", type=names_of(GATEWAY_TARGETS), default=GATEWAY_TARGETS, help="the targets besides direct"
    )
    parser.add_argument("--phases", type=names_of(PHASES), default=PHASES, help="the phases to run")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.seconds, args.chunks = 10, 1.0, 200

    from ragmux.launch.embedded import free_port

    port, upstream_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    load_before = os.getloadavg()
    with (
        BenchEnvironment(settings={"PORT": str(port), "WEB_WORKERS": "1", "LOG_LEVEL": "warning"}),
        started(
            [sys.executable, str(BENCH / "openai_upstream.py"), str(upstream_port)],
            lambda: answers(upstream_url),
            "the fake upstream",
        ),
    ):
        from gateway.clients.models import Project
        from gateway.clients.services import key_create, project_create
        from gateway.connections.models import ModelPrice
        from gateway.connections.price_services import price_create
        from gateway.connections.services import connection_create
        from ragmux.launch.processes import web_command

        upstream_key = "sk-bench-upstream-000000000000"
        Project.objects.filter(name__startswith="bench-gateway").delete()
        chat, embed = (
            connection_create(
                name=f"bench-{kind}-{port}",
                provider_type="custom_openai",
                base_url=f"{upstream_url}/v1",
                model_name=model,
                dimensions=None,
                api_key=upstream_key,
            )
            for kind, model in (("chat", "gpt-4o-mini"), ("embed", "bench-embed"))
        )
        store = None
        if "gateway_rag" in args.targets:
            fill_started = time.monotonic()
            store, rag_query = rag_store(embed, args.chunks, args.seed)
            fill_seconds = time.monotonic() - fill_started
        # A dollar budget needs the model priced (the upstream is a custom one, with no built-in price).
        price = price_create(
            provider_type="custom_openai",
            model="gpt-4o-mini",
            input_per_mtok=Decimal("0.15"),
            output_per_mtok=Decimal("0.60"),
            cached_input_per_mtok=None,
            cache_write_per_mtok=None,
            per_search_unit=None,
        )
        cold = route = None
        chat_of = {"chat_connection_id": chat.id}
        if "gateway_route" in args.targets:
            cold = connection_create(
                name=f"bench-cold-{port}",
                provider_type="custom_openai",
                # Never called while it cools; were it called, nothing listens there.
                base_url=f"http://127.0.0.1:{free_port()}/v1",
                model_name="gpt-4o-mini",
                dimensions=None,
                api_key=upstream_key,
            )
            route = cooling_route(f"bench-gateway-route-{port}", [cold, chat])
        setups = {
            "gateway": (None, {}, chat_of),
            "gateway_rag": (store and store.id, {}, chat_of),
            "gateway_limits": (None, EVERY_LIMIT, chat_of),
            "gateway_route": (None, {}, {"chat_route_id": route and route.id}),
            "gateway_responses": (None, {}, chat_of),
        }
        keys = {}
        for name in args.targets:
            store_id, limits, chats_through = setups[name]
            project = project_create(
                name=f"bench-{name.replace('_', '-')}",
                **chats_through,
                embedding_connection_id=None,
                store_id=store_id,
                system_prompt="",
                **limits,
            )
            keys[name] = key_create(project=project, name="bench", scopes=None, expires_at=None, **limits).key

        command = web_command()
        print(server_setup(command))
        base = {"host": "127.0.0.1", "path": "/v1/chat/completions", "body": BODY}
        targets = {"direct": {**base, "port": upstream_port, "key": upstream_key}}
        for name in args.targets:
            targets[name] = {**base, "port": port, "key": keys[name]}
        if store is not None:
            print(f"RAG store: {args.chunks} chunks, filled in {fill_seconds:.1f}s; query {rag_query!r}")
            targets["gateway_rag"]["body"] = {**BODY, "messages": [{"role": "user", "content": rag_query}]}
            targets["gateway_rag"]["phases"] = [phase for phase in args.phases if phase != "streams"]
        if route is not None:
            targets["gateway_route"]["phases"] = [phase for phase in args.phases if phase != "streams"]
        if "gateway_responses" in targets:
            # Its stream is typed events, with no `data: [DONE]` for the load generator to wait for.
            targets["gateway_responses"].update(path="/v1/responses", body=RESPONSES_BODY)
            targets["gateway_responses"]["phases"] = [p for p in args.phases if p in ("latency", "throughput")]
        plan = {
            "requests": args.requests,
            "seconds": args.seconds,
            "clients": CLIENTS,
            "streams": STREAMS,
            "phases": list(args.phases),
            "targets": targets,
        }
        with started(
            command,
            lambda: answers(f"http://127.0.0.1:{port}/healthz"),
            "the web server",
            env=dict(os.environ),
            stderr=subprocess.DEVNULL,
        ) as server:
            print(f"server pid {server.pid}; load average before {load_before[0]:.2f}", flush=True)
            plan["watch"] = {"server": server.pid, "database": postmaster_pid()}
            measured = subprocess.run(
                [sys.executable, str(BENCH / "loadgen.py")],
                input=json.dumps(plan),
                capture_output=True,
                text=True,
                check=True,
            )
        load_after = os.getloadavg()
        Project.objects.filter(name__startswith="bench-gateway").delete()
        from stores.services import store_delete

        if store is not None:
            store_delete(store=store)
        ModelPrice.objects.filter(pk=price.pk).delete()
        if route is not None:
            route.delete()
        for connection in (chat, embed, cold):
            if connection is not None:
                connection.delete()

    results = {name: summary(result) for name, result in json.loads(measured.stdout).items()}
    direct = results["direct"]
    metrics = (
        "p50_ms",
        "p95_ms",
        "ttfb_p50_ms",
        "requests_per_second",
        "server_cpu_ms_per_call",
        "database_cpu_ms_per_call",
        "streams_seconds",
        "streams_ttfb_p95_ms",
    )
    columns = [("direct", direct, False)]
    for name, title in (
        ("gateway", "gateway"),
        ("gateway_rag", f"gateway + RAG ({args.chunks} chunks)"),
        ("gateway_limits", "gateway + every limit"),
        ("gateway_route", "gateway + route, 1st target cooling"),
        ("gateway_responses", "gateway /v1/responses, stored"),
    ):
        if name in results:
            columns.append((title, results[name], name != "gateway_rag"))
    rows = []
    for metric in metrics:
        if metric not in direct:
            continue
        row = [metric]
        for _, target, with_added in columns:
            row.append(f"{target[metric]:.2f}" if metric in target else "-")
            if with_added:
                row.append(f"{target[metric] - direct[metric]:+.2f}" if metric in target else "-")
        rows.append(tuple(row))
    for metric in ("streams_ok", "streams_errors", "failed", "failures"):
        rows.append(
            (
                metric,
                *(
                    cell
                    for _, target, with_added in columns
                    for cell in (str(target.get(metric) or "-"), "")[: 1 + with_added]
                ),
            )
        )
    print_table(
        rows, tuple(["metric", *(c for title, _, with_added in columns for c in (title, "added")[: 1 + with_added])])
    )

    def added(name: str, metric: str) -> float | None:
        target = results.get(name, {})
        return target[metric] - direct[metric] if metric in target else None

    def measured_value(name: str, metric: str):
        return results.get(name, {}).get(metric)

    figures = {
        "added_p50_ms": added("gateway", "p50_ms"),
        "added_p95_ms": added("gateway", "p95_ms"),
        "added_ttfb_p50_ms": added("gateway", "ttfb_p50_ms"),
        "gateway_requests_per_second": measured_value("gateway", "requests_per_second"),
        "gateway_server_cpu_ms_per_call": measured_value("gateway", "server_cpu_ms_per_call"),
        "gateway_database_cpu_ms_per_call": measured_value("gateway", "database_cpu_ms_per_call"),
        "direct_requests_per_second": measured_value("direct", "requests_per_second"),
        "gateway_failed": measured_value("gateway", "failed"),
        "gateway_failures": measured_value("gateway", "failures"),
        "gateway_streams_ok": measured_value("gateway", "streams_ok"),
        "gateway_streams_errors": measured_value("gateway", "streams_errors"),
        "gateway_streams_ttfb_p95_ms": measured_value("gateway", "streams_ttfb_p95_ms"),
        "direct_streams_ttfb_p95_ms": measured_value("direct", "streams_ttfb_p95_ms"),
        "rag_chunks": args.chunks if "gateway_rag" in results else None,
        "rag_p50_ms": measured_value("gateway_rag", "p50_ms"),
        "rag_p95_ms": measured_value("gateway_rag", "p95_ms"),
        "rag_added_p50_ms": added("gateway_rag", "p50_ms"),
        "rag_ttfb_p50_ms": measured_value("gateway_rag", "ttfb_p50_ms"),
        "rag_requests_per_second": measured_value("gateway_rag", "requests_per_second"),
        "rag_failed": measured_value("gateway_rag", "failed"),
        "limits_added_p50_ms": added("gateway_limits", "p50_ms"),
        "limits_added_p95_ms": added("gateway_limits", "p95_ms"),
        "limits_added_ttfb_p50_ms": added("gateway_limits", "ttfb_p50_ms"),
        "limits_requests_per_second": measured_value("gateway_limits", "requests_per_second"),
        "limits_server_cpu_ms_per_call": measured_value("gateway_limits", "server_cpu_ms_per_call"),
        "limits_database_cpu_ms_per_call": measured_value("gateway_limits", "database_cpu_ms_per_call"),
        "limits_failed": measured_value("gateway_limits", "failed"),
        "limits_streams_ok": measured_value("gateway_limits", "streams_ok"),
        "route_added_p50_ms": added("gateway_route", "p50_ms"),
        "route_added_p95_ms": added("gateway_route", "p95_ms"),
        "route_added_ttfb_p50_ms": added("gateway_route", "ttfb_p50_ms"),
        "route_requests_per_second": measured_value("gateway_route", "requests_per_second"),
        "route_failed": measured_value("gateway_route", "failed"),
        "responses_added_p50_ms": added("gateway_responses", "p50_ms"),
        "responses_added_p95_ms": added("gateway_responses", "p95_ms"),
        "responses_requests_per_second": measured_value("gateway_responses", "requests_per_second"),
        "responses_server_cpu_ms_per_call": measured_value("gateway_responses", "server_cpu_ms_per_call"),
        "responses_database_cpu_ms_per_call": measured_value("gateway_responses", "database_cpu_ms_per_call"),
        "responses_failed": measured_value("gateway_responses", "failed"),
    }
    # What did not run is left out.
    figures = {
        name: round(value, 2) if isinstance(value, float) else value
        for name, value in figures.items()
        if value is not None
    }
    met = {}
    if "added_p50_ms" in figures:
        met["added_p50"] = figures["added_p50_ms"] <= TARGETS["added_p50_ms"]
    if "added_ttfb_p50_ms" in figures:
        met["added_ttfb"] = figures["added_ttfb_p50_ms"] <= TARGETS["added_ttfb_p50_ms"]
    if "gateway_requests_per_second" in figures:
        met["requests_per_second"] = figures["gateway_requests_per_second"] >= TARGETS["requests_per_second"]
    if "gateway_streams_ttfb_p95_ms" in figures:
        met["streams"] = (
            figures["gateway_streams_ok"] == STREAMS
            and figures["gateway_streams_ttfb_p95_ms"] <= TARGETS["streams_ttfb_p95_ms"]
        )
    if "limits_added_p50_ms" in figures:
        met["limits_added_p50"] = figures["limits_added_p50_ms"] <= TARGETS["added_p50_ms"]
    if "limits_requests_per_second" in figures:
        met["limits_requests_per_second"] = figures["limits_requests_per_second"] >= TARGETS["requests_per_second"]
    if "route_added_p50_ms" in figures:
        met["route_added_p50"] = figures["route_added_p50_ms"] <= TARGETS["added_p50_ms"]
    if "responses_added_p50_ms" in figures:
        met["responses_added_p50"] = figures["responses_added_p50_ms"] <= TARGETS["added_p50_ms"]
    print("targets met: " + ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in met.items()))
    print(f"load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    report(
        {
            "bench": "gateway",
            "requests": args.requests,
            "throughput_seconds": args.seconds,
            "clients": CLIENTS,
            "streams": STREAMS,
            **figures,
            "targets_met": met,
            "load_average": [round(load_before[0], 2), round(load_after[0], 2)],
        }
    )


if __name__ == "__main__":
    main()
