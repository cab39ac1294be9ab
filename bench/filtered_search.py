"""Filtered search latency (issue 46): the search function with and without a metadata filter, on
one large synthetic store, per mode and backend, for filters of every selectivity.

    python bench/filtered_search.py [--chunks N] [--queries Q] [--smoke]

The store is bench/search_latency.py's (Zipf texts, clustered vectors, documents of 10 chunks),
its documents given attributes by id: ``customer`` (1000 values: a selective filter passes 0.1%
of the chunks), ``tier`` (10 values: 10%), ``region`` (2 values: 50%) and ``year`` (10 values;
``gte`` the middle one passes 50% through a comparison no index answers). Each query is timed
through ``store_search`` with its vector passed in (embedding excluded); each filtered result is
checked to hold top_k hits, all passing. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from harness import BenchEnvironment, fresh_store, local_connection, print_table, report
from search_latency import (
    CHUNKS_PER_CLUSTER,
    MAX_CLUSTERS,
    VOCABULARY,
    WORDS_PER_QUERY,
    ZIPF_EXPONENT,
    clustered_vectors,
    fill_store,
    near_copies,
    pseudo_words,
    synthetic_texts,
    timed,
    zipf_cdf,
)

from retrieval.evaluation.scores import percentile

STORE_NAME = "bench-filtered-search"
TOP_K = 10
CONFIGURATIONS = (("vector", "bm25"), ("lexical", "bm25"), ("hybrid", "bm25"), ("hybrid", "pgvector"))
# (name, the share of chunks passing, the filter)
FILTERS = (
    ("none", 1.0, None),
    ("selective: customer eq (0.1%)", 0.001, {"type": "eq", "key": "customer", "value": "c7"}),
    ("medium: tier eq (10%)", 0.1, {"type": "eq", "key": "tier", "value": 3}),
    ("broad: region eq (50%)", 0.5, {"type": "eq", "key": "region", "value": "north"}),
    ("broad range: year gte (50%)", 0.5, {"type": "gte", "key": "year", "value": 2020}),
)


def set_attributes(store) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE documents SET attributes = jsonb_build_object('customer', 'c' || (id %% 1000), "
            "'tier', id %% 10, 'region', CASE WHEN id %% 2 = 0 THEN 'north' ELSE 'south' END, 'year', 2015 + id %% 10) "
            "WHERE store_id = %s",
            [store.pk],
        )
        cursor.execute("VACUUM ANALYZE documents")


def passing_documents(store, raw) -> set[int]:
    from stores.models import Document

    return (
        set(
            Document.objects.filter(store=store, attributes__contains={raw["key"]: raw["value"]}).values_list(
                "id", flat=True
            )
        )
        if raw["type"] == "eq"
        else set(
            Document.objects.filter(store=store, **{f"attributes__{raw['key']}__gte": raw["value"]}).values_list(
                "id", flat=True
            )
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, help="chunks in the store (default 100000; 2000 with --smoke)")
    parser.add_argument("--queries", type=int, help="queries per cell (default 100; 10 with --smoke)")
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    chunk_count = args.chunks or (2000 if args.smoke else 100000)
    query_count = args.queries or (10 if args.smoke else 100)
    rng = np.random.default_rng(args.seed)

    with BenchEnvironment():
        from retrieval.filters import parse_filter
        from retrieval.search import store_search

        words = np.array(pseudo_words(VOCABULARY))
        cdf = zipf_cdf(VOCABULARY, ZIPF_EXPONENT)
        texts = synthetic_texts(rng, words, cdf, chunk_count, (40, 250))
        vectors = clustered_vectors(
            rng, chunk_count, max(1, min(MAX_CLUSTERS, round(chunk_count / CHUNKS_PER_CLUSTER)))
        )
        store = fresh_store(STORE_NAME, local_connection(), search_backend="bm25", search_mode="hybrid")
        started = time.monotonic()
        fill_store(store, texts, vectors)
        set_attributes(store)
        print(f"filled {chunk_count} chunks in {time.monotonic() - started:.0f}s")

        queries = synthetic_texts(rng, words, cdf, query_count, WORDS_PER_QUERY)
        query_vectors = [v.tolist() for v in near_copies(rng, vectors[rng.choice(chunk_count, query_count)])]
        loads, rows, results = [os.getloadavg()[0]], [], []
        for mode, backend in CONFIGURATIONS:
            for name, share, raw in FILTERS:
                overrides = {"mode": mode, "backend": backend, "top_k": TOP_K}
                if raw is not None:
                    overrides["filters"] = parse_filter(raw)
                    allowed = passing_documents(store, raw)
                samples, short = [], 0
                for query, vector in zip(queries, query_vectors, strict=True):
                    store_search(store=store, query=query, overrides=overrides, query_vector=vector)  # warm
                    elapsed, result = timed(
                        store_search, store=store, query=query, overrides=overrides, query_vector=vector
                    )
                    samples.append(elapsed)
                    if raw is not None:
                        assert all(hit.document_id in allowed for hit in result.hits), (name, mode, backend)
                    short += len(result.hits) < TOP_K
                loads.append(os.getloadavg()[0])
                p50, p95 = percentile(samples, 50), percentile(samples, 95)
                rows.append((mode, backend, name, f"{p50:.1f}", f"{p95:.1f}", short))
                results.append(
                    {
                        "mode": mode,
                        "backend": backend,
                        "filter": name,
                        "share": share,
                        "p50_ms": p50,
                        "p95_ms": p95,
                        "short_results": short,
                    }
                )
        print_table(rows, ("mode", "backend", "filter", "p50 ms", "p95 ms", "results short of top_k"))
        print(f"load average (1 min) during the run: {min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} cores")
        report(
            {
                "chunks": chunk_count,
                "queries": query_count,
                "top_k": TOP_K,
                "load": [min(loads), max(loads)],
                "results": results,
            }
        )


if __name__ == "__main__":
    main()
