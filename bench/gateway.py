"""Gateway overhead: `/v1/chat/completions` through the production server (uvicorn, one web
worker) against calling the same upstream directly.

    python bench/gateway.py [--requests N] [--seconds S] [--chunks C] [--smoke]

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
attempt's record; held to the same 5 ms. Last line: one JSON object.
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
from harness import BenchEnvironment, answers, fresh_store, percentile, print_table, report, started

BENCH = Path(__file__).resolve().parent
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something short."}]}
CLIENTS = 50
STREAMS = 100
RAG_CHUNKS = 10_000
RAG_QUERY_WORDS = 6
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
    from gateway.clients import cooldowns
    from gateway.connections.services import TargetSpec, route_create

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


def summary(result: dict) -> dict:
    out = {}
    if "latency_ms" in result:
        out["p50_ms"] = percentile(result["latency_ms"], 50)
        out["p95_ms"] = percentile(result["latency_ms"], 95)
    if "ttfb_ms" in result:
        out["ttfb_p50_ms"] = percentile(result["ttfb_ms"], 50)
    for name in ("requests_per_second", "failed", "failures", "streams_ok", "streams_errors", "streams_seconds"):
        if name in result:
            out[name] = result[name]
    if result.get("streams_first_byte_ms"):
        out["streams_ttfb_p95_ms"] = percentile(result["streams_first_byte_ms"], 95)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="sequential calls per latency measurement")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each 50-client throughput run")
    parser.add_argument("--chunks", type=int, default=RAG_CHUNKS, help="chunks in the RAG target's store")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--smoke", action="store_true", help="a few calls of each kind, to check the script runs")
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
        from gateway.connections.services import connection_create, price_create
        from ragmux.launch.cli import web_command

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
        keys = {}
        for name, store_id, limits in (
            ("gateway", None, {}),
            ("gateway_rag", store.id, {}),
            ("gateway_limits", None, EVERY_LIMIT),
        ):
            project = project_create(
                name=f"bench-{name.replace('_', '-')}",
                chat_connection_id=chat.id,
                embedding_connection_id=None,
                store_id=store_id,
                system_prompt="",
                **limits,
            )
            keys[name] = key_create(project=project, name="bench", scopes=None, expires_at=None, **limits).key
        routed = project_create(
            name="bench-gateway-route",
            chat_route_id=route.id,
            embedding_connection_id=None,
            store_id=None,
            system_prompt="",
        )
        keys["gateway_route"] = key_create(project=routed, name="bench", scopes=None, expires_at=None).key

        command = web_command()
        print(server_setup(command))
        print(f"RAG store: {args.chunks} chunks, filled in {fill_seconds:.1f}s; query {rag_query!r}")
        base = {"host": "127.0.0.1", "path": "/v1/chat/completions", "body": BODY}
        rag_body = {**BODY, "messages": [{"role": "user", "content": rag_query}]}
        plan = {
            "requests": args.requests,
            "seconds": args.seconds,
            "clients": CLIENTS,
            "streams": STREAMS,
            "phases": ["latency", "ttfb", "throughput", "streams"],
            "targets": {
                "direct": {**base, "port": upstream_port, "key": upstream_key},
                "gateway": {**base, "port": port, "key": keys["gateway"]},
                "gateway_rag": {
                    **base,
                    "port": port,
                    "key": keys["gateway_rag"],
                    "body": rag_body,
                    "phases": ["latency", "ttfb", "throughput"],
                },
                "gateway_limits": {**base, "port": port, "key": keys["gateway_limits"]},
                "gateway_route": {
                    **base,
                    "port": port,
                    "key": keys["gateway_route"],
                    "phases": ["latency", "ttfb", "throughput"],
                },
            },
        }
        with started(
            command,
            lambda: answers(f"http://127.0.0.1:{port}/healthz"),
            "the web server",
            env=dict(os.environ),
            stderr=subprocess.DEVNULL,
        ) as server:
            print(f"server pid {server.pid}; load average before {load_before[0]:.2f}", flush=True)
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

        store_delete(store=store)
        ModelPrice.objects.filter(pk=price.pk).delete()
        route.delete()
        for connection in (chat, embed, cold):
            connection.delete()

    results = {name: summary(result) for name, result in json.loads(measured.stdout).items()}
    direct, gateway, rag = results["direct"], results["gateway"], results["gateway_rag"]
    limited, routed = results["gateway_limits"], results["gateway_route"]
    metrics = ("p50_ms", "p95_ms", "ttfb_p50_ms", "requests_per_second", "streams_seconds", "streams_ttfb_p95_ms")
    rows = [
        (
            metric,
            f"{direct[metric]:.2f}",
            f"{gateway[metric]:.2f}",
            f"{gateway[metric] - direct[metric]:+.2f}",
            f"{rag[metric]:.2f}" if metric in rag else "-",
            f"{limited[metric]:.2f}",
            f"{limited[metric] - direct[metric]:+.2f}",
            f"{routed[metric]:.2f}" if metric in routed else "-",
            f"{routed[metric] - direct[metric]:+.2f}" if metric in routed else "",
        )
        for metric in metrics
    ]
    for metric in ("streams_ok", "streams_errors", "failed", "failures"):
        rows.append(
            (
                metric,
                *(str(target.get(metric) or "-") for target in (direct, gateway)),
                "",
                str(rag.get(metric) or "-"),
                str(limited.get(metric) or "-"),
                "",
                str(routed.get(metric) or "-"),
                "",
            )
        )
    print_table(
        rows,
        (
            "metric",
            "direct",
            "gateway",
            "added",
            f"gateway + RAG ({args.chunks} chunks)",
            "gateway + every limit",
            "added",
            "gateway + route, 1st target cooling",
            "added",
        ),
    )
    figures = {
        "added_p50_ms": round(gateway["p50_ms"] - direct["p50_ms"], 2),
        "added_p95_ms": round(gateway["p95_ms"] - direct["p95_ms"], 2),
        "added_ttfb_p50_ms": round(gateway["ttfb_p50_ms"] - direct["ttfb_p50_ms"], 2),
        "gateway_requests_per_second": round(gateway["requests_per_second"], 1),
        "direct_requests_per_second": round(direct["requests_per_second"], 1),
        "gateway_failed": gateway["failed"],
        "gateway_failures": gateway["failures"],
        "gateway_streams_ok": gateway["streams_ok"],
        "gateway_streams_errors": gateway["streams_errors"],
        "gateway_streams_ttfb_p95_ms": round(gateway["streams_ttfb_p95_ms"], 2),
        "direct_streams_ttfb_p95_ms": round(direct["streams_ttfb_p95_ms"], 2),
        "rag_chunks": args.chunks,
        "rag_p50_ms": round(rag["p50_ms"], 2),
        "rag_p95_ms": round(rag["p95_ms"], 2),
        "rag_added_p50_ms": round(rag["p50_ms"] - direct["p50_ms"], 2),
        "rag_ttfb_p50_ms": round(rag["ttfb_p50_ms"], 2),
        "rag_requests_per_second": round(rag["requests_per_second"], 1),
        "rag_failed": rag["failed"],
        "limits_added_p50_ms": round(limited["p50_ms"] - direct["p50_ms"], 2),
        "limits_added_p95_ms": round(limited["p95_ms"] - direct["p95_ms"], 2),
        "limits_added_ttfb_p50_ms": round(limited["ttfb_p50_ms"] - direct["ttfb_p50_ms"], 2),
        "limits_requests_per_second": round(limited["requests_per_second"], 1),
        "limits_failed": limited["failed"],
        "limits_streams_ok": limited["streams_ok"],
        "route_added_p50_ms": round(routed["p50_ms"] - direct["p50_ms"], 2),
        "route_added_p95_ms": round(routed["p95_ms"] - direct["p95_ms"], 2),
        "route_added_ttfb_p50_ms": round(routed["ttfb_p50_ms"] - direct["ttfb_p50_ms"], 2),
        "route_requests_per_second": round(routed["requests_per_second"], 1),
        "route_failed": routed["failed"],
    }
    met = {
        "added_p50": figures["added_p50_ms"] <= TARGETS["added_p50_ms"],
        "added_ttfb": figures["added_ttfb_p50_ms"] <= TARGETS["added_ttfb_p50_ms"],
        "requests_per_second": figures["gateway_requests_per_second"] >= TARGETS["requests_per_second"],
        "streams": gateway["streams_ok"] == STREAMS
        and figures["gateway_streams_ttfb_p95_ms"] <= TARGETS["streams_ttfb_p95_ms"],
        "limits_added_p50": figures["limits_added_p50_ms"] <= TARGETS["added_p50_ms"],
        "limits_requests_per_second": figures["limits_requests_per_second"] >= TARGETS["requests_per_second"],
        "route_added_p50": figures["route_added_p50_ms"] <= TARGETS["added_p50_ms"],
    }
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
