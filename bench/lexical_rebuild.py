"""Lexical rebuild speed: a store's lexical index rebuilt with another text search configuration
(issue 15), against a store of real prose, with searches running throughout.

    python bench/lexical_rebuild.py [--chunks N] [--config NAME] [--smoke]

The store is filled through the index writer (stores/index.py, as bench/search_latency.py does):
Cranfield's abstracts chunked by the product's chunker with the store's default settings,
repeated with a distinguishing word until there are N chunks, with random vectors (the rebuild
never reads them). The script then switches ``index_config`` from ``simple`` to ``--config`` and
back, timing each rebuild run by the service the worker runs; meanwhile a second connection
searches the store (lexical bm25) without pause and counts its answers, so "searchable
throughout" is measured too. After the round trip the term statistics must equal the ones the
fill left (a build from scratch). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from harness import (
    DEFAULT_DATASET,
    BenchEnvironment,
    document_text,
    fresh_store,
    load_beir,
    local_connection,
    print_table,
    rebuild_lexical_index,
    report,
)
from search_latency import DIMENSIONS, fill_store, unit_rows

from retrieval.evaluation.scores import percentile

SMOKE_CHUNKS = 300
QUERIES = ("heat transfer in composite slabs", "boundary layer policies", "pressure distribution on wings")


def prose_chunks(count: int) -> list[str]:
    """``count`` chunk texts from Cranfield, cut like a store with default settings cuts them."""
    from ingestion.chunking import chunk_blocks
    from ingestion.parsing.text import parse_text
    from stores.models import store_defaults

    defaults = store_defaults()
    corpus, _, _ = load_beir(DEFAULT_DATASET)
    base = [
        draft.content
        for doc in corpus
        if document_text(doc)
        for draft in chunk_blocks(
            parse_text(document_text(doc).encode()).blocks,
            strategy=defaults["chunking_strategy"],
            chunk_size=defaults["chunk_size"],
            chunk_overlap=defaults["chunk_overlap"],
        )
    ]
    # A copy number keeps repeated chunks distinct, as different documents would be.
    return [f"{base[n % len(base)]} copy{n // len(base)}" for n in range(count)]


def lexical_statistics(store_id: int) -> tuple:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT md5(string_agg(term || ':' || df, ',' ORDER BY term)) FROM store_terms WHERE store_id = %s",
            [store_id],
        )
        terms = cursor.fetchone()[0]
        cursor.execute("SELECT chunk_count, token_total FROM store_text_stats WHERE store_id = %s", [store_id])
        return (terms, *cursor.fetchone())


class Searcher(threading.Thread):
    """Searches the store without pause until stopped, on a connection of its own."""

    def __init__(self, store_id: int):
        super().__init__()
        self.store_id = store_id
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.empty = 0
        self.errors: list[str] = []

    def run(self) -> None:
        from django.db import connections

        from retrieval.search import store_search
        from stores.models import RagStore

        try:
            while not self.stop.is_set():
                store = RagStore.objects.get(pk=self.store_id)
                query = QUERIES[len(self.latencies) % len(QUERIES)]
                started = time.monotonic()
                try:
                    result = store_search(store=store, query=query, overrides={"mode": "lexical", "backend": "bm25"})
                except Exception as exc:  # counted and reported: a search must never fail here
                    self.errors.append(repr(exc))
                    continue
                self.latencies.append((time.monotonic() - started) * 1000)
                self.empty += not result.hits
        finally:
            connections.close_all()


def timed_rebuild(store, config: str) -> dict:
    searcher = Searcher(store.pk)
    searcher.start()
    try:
        seconds = rebuild_lexical_index(store, config)
    finally:
        searcher.stop.set()
        searcher.join()
    latencies = searcher.latencies or [0.0]
    return {
        "config": config,
        "seconds": round(seconds, 3),
        "searches_during": len(searcher.latencies),
        "searches_empty": searcher.empty,
        "search_errors": searcher.errors[:5],
        "search_p50_ms": round(percentile(latencies, 50), 2),
        "search_p95_ms": round(percentile(latencies, 95), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--config", default="english")
    parser.add_argument("--smoke", action="store_true", help=f"a tiny run ({SMOKE_CHUNKS} chunks)")
    args = parser.parse_args()
    count = SMOKE_CHUNKS if args.smoke else args.chunks

    with BenchEnvironment():
        # Filled in `simple` (not the default `english`), the configuration the round trip starts from.
        store = fresh_store("bench-lexical-rebuild", local_connection(), index_config="simple")
        texts = prose_chunks(count)
        vectors = unit_rows(np.random.default_rng(0).standard_normal((count, DIMENSIONS)).astype(np.float32))
        fill_started = time.monotonic()
        fill_store(store, texts, vectors)
        fill_seconds = time.monotonic() - fill_started
        from_scratch = lexical_statistics(store.pk)

        runs = [timed_rebuild(store, args.config), timed_rebuild(store, "simple")]
        for run in runs:
            run["chunks_per_second"] = round(count / run["seconds"], 1)
        statistics_restored = lexical_statistics(store.pk) == from_scratch

        print(f"{count} chunks of Cranfield prose; filled through the index writer in {fill_seconds:.1f} s")
        print_table(
            [
                (
                    f"simple → {run['config']}" if n == 0 else f"{args.config} → simple",
                    f"{run['seconds']:.2f}",
                    f"{run['chunks_per_second']:.0f}",
                    run["searches_during"],
                    run["searches_empty"],
                    len(run["search_errors"]),
                    f"{run['search_p50_ms']:.1f} / {run['search_p95_ms']:.1f}",
                )
                for n, run in enumerate(runs)
            ],
            ("rebuild", "seconds", "chunks/s", "searches during", "empty", "errors", "search p50 / p95 ms"),
        )
        print(f"term statistics after the round trip equal the fill's: {statistics_restored}")
        report(
            {
                "chunks": count,
                "fill_seconds": round(fill_seconds, 2),
                "rebuilds": runs,
                "statistics_restored": statistics_restored,
            }
        )


if __name__ == "__main__":
    main()
