"""Search latency: the search function per mode and backend on one large synthetic store, next to
the raw SQL it issues, and HNSW recall@10 against exact search.

    python bench/search_latency.py [--chunks N] [--queries Q] [--classes C ...] [--skip-fulltext] [--reuse]
                                   [--smoke]

The store is filled directly with bulk SQL (no embedding model): chunk texts draw their words
from a Zipf distribution over a pseudo-word vocabulary, vectors come from Gaussian clusters on
the unit sphere. Term statistics are written with the same SQL the ingestion path uses, so BM25
sees real document frequencies and lengths. Each query is timed through ``store_search`` (the
query vector passed in, so embedding is excluded) and then by replaying the exact statements it
issued on the bare database cursor; the difference is the Python overhead. Last line: one JSON
object.

Query classes: ``typical`` (3–8 words from the corpus distribution, every configuration),
``common`` (2–5 of the corpus's 5 most frequent words that the store's index language keeps:
a stop word parses to nothing and costs nothing), ``paragraph`` (a pasted paragraph of 60
words), ``phrase`` (a quoted phrase from a chunk, two words and an exclusion) and ``unknown`` (a
pasted page, the search API's 4000 characters, of four-syllable words the vocabulary lacks,
searched with typo tolerance on: every word is a candidate for correction) and ``misspelt`` (a
pasted paragraph of 60 words with one letter of every word of four letters or more replaced by
one the vocabulary never uses, typo tolerance on: each such word has a correction one edit
away), the last five on the ``bm25`` configurations. Each class without typo tolerance also
reports the overlap of lexical ``bm25``'s top 10 with full scoring (every posting of every term
read) over its first queries.

``--classes`` measures only the named classes, ``--skip-fulltext`` leaves out the ``pgvector``
rows; ``--reuse`` keeps the store a previous run with the same ``--chunks`` and ``--seed`` left
in the database (with DATABASE_URL set: the embedded default is a scratch folder deleted at
exit), so iterating on the search skips the fill.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import time
from collections.abc import Sequence
from contextlib import contextmanager
from functools import partial
from unittest import mock

import numpy as np
from harness import BenchEnvironment, fresh_store, local_connection, print_table, report

from retrieval.evaluation.scores import percentile
from retrieval.ranking import allowed_typos

DIMENSIONS = 384
VOCABULARY = 30000
ZIPF_EXPONENT = 1.0
WORDS_PER_CHUNK = (40, 250)
WORDS_PER_QUERY = (3, 8)
CHUNKS_PER_CLUSTER = 50
MAX_CLUSTERS = 2000
# Noise norms relative to a unit center: chunks spread around their cluster center (cosine
# similarity to cluster mates about 0.7), queries sit close to one chunk.
CLUSTER_SPREAD = 0.6
QUERY_SPREAD = 0.1
CHUNKS_PER_DOCUMENT = 10
FILL_BATCH = 2000
TOP_K = 10
RECALL_AT = 10
EF_SWEEP = (40, 80, 120, 200, 400)
# A graph element in memory during the build: its vector, its neighbour lists and their
# distances, with a quarter to spare.
HNSW_BUILD_BYTES_PER_CHUNK = round((DIMENSIONS * 4 + 1024) * 1.25)
CONFIGURATIONS = (
    ("vector", None),
    ("lexical", "bm25"),
    ("lexical", "pgvector"),
    ("hybrid", "bm25"),
    ("hybrid", "pgvector"),
)
QUERY_CLASSES = ("typical", "common", "paragraph", "phrase", "unknown", "misspelt")
# Search settings a class is measured with beyond its mode and backend.
CLASS_OVERRIDES = {"unknown": {"typo_tolerance": True}, "misspelt": {"typo_tolerance": True}}
UNKNOWN_QUERY_CHARACTERS = 4000  # the search API's longest query
# The classes added for issue 10 measure the bm25 backend, the one they were slow on.
BM25_CONFIGURATIONS = (("lexical", "bm25"), ("hybrid", "bm25"))
COMMON_WORDS = 5
COMMON_QUERY_WORDS = (2, 5)
PARAGRAPH_WORDS = 60
# Exclusions are words of middling frequency (Zipf ranks in this range), so they remove some
# chunks without emptying the result.
EXCLUSION_RANKS = (20, 200)
OVERLAP_QUERIES = 20
STORE_NAME = "bench-search-latency"
CONSONANTS = "bdfghklmnprstvz"
VOWELS = "aeiou"
# Letters no pseudo-word holds: a word with one of them is certainly a misspelling.
FOREIGN_LETTERS = "cjqwxy"


# --- synthetic corpus -------------------------------------------------------------------------


def pseudo_words(count: int) -> list[str]:
    """``count`` distinct pronounceable words, shortest first (frequent words are short, as in
    natural language): consonant-vowel syllables, one syllable, then two, then three."""
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    words, tier = [], [""]
    while len(words) < count:
        tier = [prefix + syllable for prefix in tier for syllable in syllables]
        words.extend(tier[: count - len(words)])
    return words


def zipf_cdf(vocabulary: int, exponent: float) -> np.ndarray:
    """Cumulative probabilities of ranks 1..vocabulary under Zipf's law (p ∝ 1 / rank^s)."""
    weights = 1.0 / np.arange(1, vocabulary + 1) ** exponent
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def draw_ranks(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(size)), len(cdf) - 1)


def synthetic_texts(rng: np.random.Generator, words: np.ndarray, cdf: np.ndarray, count: int, span) -> list[str]:
    lengths = rng.integers(span[0], span[1] + 1, size=count)
    ranks = draw_ranks(rng, cdf, int(lengths.sum()))
    texts, start = [], 0
    for length in lengths:
        texts.append(" ".join(words[ranks[start : start + length]]))
        start += length
    return texts


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def clustered_vectors(rng: np.random.Generator, count: int, clusters: int) -> np.ndarray:
    """Unit vectors: a random unit center per cluster plus Gaussian noise, normalised."""
    centers = unit_rows(rng.standard_normal((clusters, DIMENSIONS)))
    return vectors_around(rng, centers, rng.integers(0, clusters, size=count))


def vectors_around(rng: np.random.Generator, centers: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """One unit vector per entry of ``owner``: its center (a row of ``centers``) plus Gaussian
    noise of norm about CLUSTER_SPREAD, normalised."""
    noise = rng.standard_normal((len(owner), centers.shape[1])) * (CLUSTER_SPREAD / np.sqrt(centers.shape[1]))
    return unit_rows(centers[owner] + noise).astype(np.float32)


def near_copies(rng: np.random.Generator, vectors: np.ndarray) -> np.ndarray:
    noise = rng.standard_normal(vectors.shape) * (QUERY_SPREAD / np.sqrt(DIMENSIONS))
    return unit_rows(vectors.astype(np.float64) + noise).astype(np.float32)


def indexed_common(store, words: np.ndarray) -> list[str]:
    """The ``COMMON_WORDS`` most frequent words that the store's index language does not drop."""
    from retrieval.sql import word_lexemes

    frequent = [str(word) for word in words[: COMMON_WORDS * 10]]
    kept = {word for word, _ in word_lexemes(frequent, store.query_config)}
    return [word for word in frequent if word in kept][:COMMON_WORDS]


def issue_queries(
    rng: np.random.Generator, words: np.ndarray, cdf: np.ndarray, texts: list[str], count: int, common_words: list[str]
) -> dict[str, list[str]]:
    """``count`` queries of each class but ``typical`` (drawn after it, so the typical queries
    and their vectors are those of earlier runs)."""
    common = []
    for _ in range(count):
        size = rng.integers(COMMON_QUERY_WORDS[0], COMMON_QUERY_WORDS[1] + 1)
        common.append(" ".join(rng.permutation(common_words)[:size]))
    paragraphs = synthetic_texts(rng, words, cdf, count, (PARAGRAPH_WORDS, PARAGRAPH_WORDS))
    phrases = []
    pairs = synthetic_texts(rng, words, cdf, count, (2, 2))
    for source, pair in zip(rng.choice(len(texts), size=count), pairs, strict=True):
        # Two neighbouring words of a chunk, so the phrase matches at least that chunk.
        chunk_words = texts[source].split()
        start = int(rng.integers(0, len(chunk_words) - 1))
        excluded = words[rng.integers(*EXCLUSION_RANKS)]
        phrases.append(f'"{chunk_words[start]} {chunk_words[start + 1]}" {pair} -{excluded}')
    syllables = np.array(pseudo_words(len(CONSONANTS) * len(VOWELS)))
    unknown = []
    for _ in range(count):
        # Four syllables: longer than every vocabulary word, so none is known.
        page = ["".join(rng.choice(syllables, size=4)) for _ in range(UNKNOWN_QUERY_CHARACTERS // 9 + 1)]
        unknown.append(" ".join(page)[:UNKNOWN_QUERY_CHARACTERS].rsplit(" ", 1)[0])
    misspelt = []
    for paragraph in synthetic_texts(rng, words, cdf, count, (PARAGRAPH_WORDS, PARAGRAPH_WORDS)):
        typed = []
        for word in paragraph.split():
            if allowed_typos(word):
                position = int(rng.integers(1, len(word)))
                word = word[:position] + str(rng.choice(list(FOREIGN_LETTERS))) + word[position + 1 :]
            typed.append(word)
        misspelt.append(" ".join(typed))
    return {"common": common, "paragraph": paragraphs, "phrase": phrases, "unknown": unknown, "misspelt": misspelt}


# --- filling the store ------------------------------------------------------------------------


def fill_store(
    store,
    texts: list[str],
    vectors: np.ndarray,
    *,
    documents: Sequence[tuple[str, int]] | None = None,
    sections: Sequence[str] | None = None,
) -> tuple[np.ndarray, dict[str, float]]:
    """Writes documents, chunks, vectors and term statistics; returns the chunk ids (in the order
    of ``texts``) and the seconds each step took. ``documents`` is (name, chunk count) per
    document, each holding the next chunks of ``texts`` (default: synthetic documents of
    CHUNKS_PER_DOCUMENT chunks); a name is the document's source and, with `.txt`, its file name.
    A store can be filled more than once; its vector index is rebuilt each time."""
    from django.db import connection, transaction

    from ingestion.chunking import text_hash
    from ingestion.pipeline import model_key
    from stores import index
    from stores.models import Document, RagStore
    from stores.vector_tables import column_type, ensure_embedding_table, index_name

    steps: dict[str, float] = {}
    started = time.monotonic()
    RagStore.objects.filter(pk=store.pk).update(dimensions=DIMENSIONS)
    store.dimensions = DIMENSIONS
    table = ensure_embedding_table(DIMENSIONS)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE store_id <> %s)", [store.pk])
        shared = cursor.fetchone()[0]
        # Building the graph once after the load is several times faster than growing it row by
        # row; only done when no other store's vectors depend on the index meanwhile.
        if not shared:
            cursor.execute(f"DROP INDEX IF EXISTS {index_name(DIMENSIONS)}")

    if documents is None:
        documents = [
            (f"synthetic-{n}", min(CHUNKS_PER_DOCUMENT, len(texts) - start))
            for n, start in enumerate(range(0, len(texts), CHUNKS_PER_DOCUMENT))
        ]
    written = Document.objects.bulk_create(
        [
            Document(
                store=store,
                filename=f"{name}.txt",
                title=name,
                source=name,
                mime="text/plain",
                original=b"",
                size_bytes=0,
                content_sha256=hashlib.sha256(f"{store.pk}:{name}".encode()).hexdigest(),
                status="ready",
                progress_percent=100,
                chunk_count=count,
            )
            for name, count in documents
        ],
        batch_size=5000,
    )
    # Each chunk's document and its place in it.
    owner = np.repeat(np.array([d.pk for d in written], dtype=np.int64), [count for _, count in documents])
    place = np.concatenate([np.arange(count) for _, count in documents]) if documents else np.zeros(0, np.int64)
    steps["documents"] = time.monotonic() - started

    key = model_key(store.embedding_connection)
    chunk_ids = np.zeros(len(texts), dtype=np.int64)
    started = time.monotonic()
    for start in range(0, len(texts), FILL_BATCH):
        positions = range(start, min(start + FILL_BATCH, len(texts)))
        rows = [
            index.ChunkRow(
                document_id=int(owner[p]),
                index=int(place[p]),
                content=texts[p],
                section=sections[p] if sections else "",
                page=None,
                embedded_hash=text_hash(texts[p]),
            )
            for p in positions
        ]
        # The one index writer, a batch of chunks per transaction instead of a document's.
        with transaction.atomic():
            index.lock_store_for_writing(store.pk)
            batch_ids = index.write_chunks(store_id=store.pk, rows=rows)
            index.write_vectors(
                store_id=store.pk,
                dimensions=DIMENSIONS,
                model_key=key,
                chunk_ids=batch_ids,
                rows=rows,
                vectors=[index.format_vector(vectors[p]) for p in positions],
            )
            index.add_to_statistics(store_id=store.pk, chunk_ids=batch_ids)
        chunk_ids[start : start + len(rows)] = batch_ids
    steps["chunks, vectors, postings, statistics"] = time.monotonic() - started

    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(f"SET maintenance_work_mem = '{hnsw_build_memory_mb(len(texts))}MB'")
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {index_name(DIMENSIONS)} ON {table} "
            f"USING hnsw (embedding {column_type(DIMENSIONS)}_cosine_ops)"
        )
        cursor.execute("RESET maintenance_work_mem")
    steps["hnsw index"] = time.monotonic() - started

    started = time.monotonic()
    with connection.cursor() as cursor:
        # Index-only scans of the postings need the visibility map; the planner needs row counts.
        for name in ("documents", "chunks", "chunk_terms", "store_terms", "store_text_stats", table):
            cursor.execute(f"VACUUM ANALYZE {name}")
    steps["vacuum analyze"] = time.monotonic() - started
    return chunk_ids, steps


def hnsw_build_memory_mb(chunk_count: int) -> int:
    """Enough maintenance_work_mem for pgvector to build the whole graph in memory: past that it
    goes on on disk, many times slower (at a million chunks, 2 GB is not enough)."""
    return max(2048, math.ceil(chunk_count * HNSW_BUILD_BYTES_PER_CHUNK / 2**20))


def reusable_chunk_ids(chunk_count: int) -> np.ndarray | None:
    """The chunk ids (in the order of the texts that filled them) of the store a previous run
    left, if it has ``chunk_count`` chunks; its texts and vectors are those this seed draws."""
    from stores.models import Chunk

    ids = list(Chunk.objects.filter(store__name=STORE_NAME).order_by("id").values_list("id", flat=True))
    return np.array(ids, dtype=np.int64) if len(ids) == chunk_count else None


# --- measuring --------------------------------------------------------------------------------


def capture_statements(call) -> list[tuple[str, object]]:
    """The (sql, params) of every statement ``call`` runs on the Django connection."""
    from django.db import connection

    statements = []

    def record(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        call()
    return statements


def replay(statements: list[tuple[str, object]]) -> None:
    """Runs the statements again on the bare psycopg connection, fetching every row."""
    from django.db import connection

    with connection.connection.cursor() as cursor:
        for sql, params in statements:
            if params is None:
                cursor.execute(sql)
            else:
                cursor.execute(sql, params)
            if cursor.description is not None:
                cursor.fetchall()


def timed(call, *args, **kwargs) -> tuple[float, object]:
    """(milliseconds, result) of one call."""
    started = time.perf_counter()
    result = call(*args, **kwargs)
    return (time.perf_counter() - started) * 1000, result


def measure_configuration(
    store, queries, query_vectors, mode, backend, extra: dict
) -> tuple[list[float], list[float], list]:
    """Per query: search milliseconds, raw-SQL milliseconds, and the hit chunk ids."""
    from retrieval.search import store_search

    overrides = {"mode": mode, "top_k": TOP_K, **({"backend": backend} if backend else {}), **extra}
    search_ms, raw_ms, hits = [], [], []
    for query, vector in zip(queries, query_vectors, strict=True):
        search = partial(store_search, store=store, query=query, overrides=overrides, query_vector=vector)
        # The first run records the statements and warms the caches both timings then share.
        statements = capture_statements(search)
        elapsed, result = timed(search)
        search_ms.append(elapsed)
        raw_ms.append(timed(replay, statements)[0])
        hits.append([hit.chunk_id for hit in result.hits])
    return search_ms, raw_ms, hits


def configurations_of(query_class: str) -> tuple[tuple[str, str | None], ...]:
    return CONFIGURATIONS if query_class == "typical" else BM25_CONFIGURATIONS


def top_overlap(store, queries: list[str]) -> float:
    """Mean share of the full-scoring BM25 top 10 that the search's lexical list has in its top 10
    (the lexical side of a search, as store_search asks for it: 3 × top_k candidates)."""
    from retrieval import bm25
    from retrieval.search import bm25_candidates

    def top(query: str) -> set[int]:
        rows = bm25_candidates(store, query, 3 * TOP_K)
        return {chunk_id for chunk_id, _ in rows[:TOP_K]}

    shares = []
    for query in queries:
        found = top(query)
        # A budget no query reaches: every posting of every term is read, the scoring is full.
        with mock.patch.object(bm25, "BM25_POSTING_BUDGET", 2**62):
            exact = top(query)
        if exact:
            shares.append(len(found & exact) / len(exact))
    return sum(shares) / len(shares) if shares else 1.0


def exact_neighbours(vectors: np.ndarray, chunk_ids: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    similarity = vectors @ query.astype(np.float32)
    nearest = np.argpartition(-similarity, k)[:k]
    return chunk_ids[nearest].tolist()


def recall(found: list[list[int]], expected: list[list[int]]) -> float:
    """Mean share of each exact top-k present in the corresponding result."""
    shares = [len(set(f) & set(e)) / len(e) for f, e in zip(found, expected, strict=True) if e]
    return sum(shares) / len(shares) if shares else 1.0


def ef_sweep(store, query_vectors, expected, chunk_count: int) -> list[dict]:
    """Recall@10 and raw latency of the HNSW candidate query at several ef_search values."""
    from django.conf import settings

    from retrieval import sql
    from stores.index import format_vector

    if chunk_count <= settings.VECTOR_EXACT_SCAN_MAX_CHUNKS:
        return []
    limit = 3 * TOP_K
    rows = []
    for ef in EF_SWEEP:
        latencies, found = [], []
        for vector in query_vectors:
            elapsed, candidates = timed(
                sql.vector_candidates,
                store_id=store.pk,
                width=DIMENSIONS,
                query_vector=format_vector(vector.tolist()),
                limit=limit,
                ef_search=ef,
                exact=False,
                max_scan_tuples=sql.DEFAULT_MAX_SCAN_TUPLES,
            )
            latencies.append(elapsed)
            found.append([chunk_id for chunk_id, _ in candidates[:RECALL_AT]])
        rows.append(
            {
                "ef_search": ef,
                "recall@10": round(recall(found, expected), 4),
                "p50_ms": round(percentile(latencies, 50), 3),
                "p95_ms": round(percentile(latencies, 95), 3),
            }
        )
    return rows


@contextmanager
def timing_metrics(samples: list[float]):
    """Times every ``ragmux.core.metrics.observe`` call (one per search, in the process's memory;
    a Redis round trip until issue 23) into ``samples`` while still recording the metric."""
    from ragmux.core import metrics

    original = metrics.observe

    def observe(*args, **kwargs):
        samples.append(timed(original, *args, **kwargs)[0])

    with mock.patch.object(metrics, "observe", observe):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, help="chunks in the store (default 100000; 2000 with --smoke)")
    parser.add_argument("--queries", type=int, help="queries per configuration (default 200; 20 with --smoke)")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--smoke", action="store_true", help="small run to check the script works")
    parser.add_argument("--classes", nargs="+", choices=QUERY_CLASSES, default=list(QUERY_CLASSES))
    parser.add_argument("--reuse", action="store_true", help="search the store a previous run of this size left")
    parser.add_argument(
        "--skip-fulltext", action="store_true", help="leave out the pgvector full-text rows (the slowest to measure)"
    )
    parser.add_argument(
        "--index-config", metavar="NAME", help="the store's index language (default: the store default)"
    )
    args = parser.parse_args()
    chunk_count = args.chunks or (2000 if args.smoke else 100000)
    query_count = args.queries or (20 if args.smoke else 200)
    rng = np.random.default_rng(args.seed)

    with BenchEnvironment():
        from django.conf import settings

        from stores.models import RagStore

        started = time.monotonic()
        words = np.array(pseudo_words(VOCABULARY))
        cdf = zipf_cdf(VOCABULARY, ZIPF_EXPONENT)
        texts = synthetic_texts(rng, words, cdf, chunk_count, WORDS_PER_CHUNK)
        clusters = max(1, min(MAX_CLUSTERS, round(chunk_count / CHUNKS_PER_CLUSTER)))
        vectors = clustered_vectors(rng, chunk_count, clusters)
        generate_seconds = time.monotonic() - started

        chunk_ids = reusable_chunk_ids(chunk_count) if args.reuse else None
        if chunk_ids is None:
            language = {"index_config": args.index_config} if args.index_config else {}
            store = fresh_store(STORE_NAME, local_connection(), search_backend="bm25", search_mode="hybrid", **language)
            chunk_ids, steps = fill_store(store, texts, vectors)
        else:
            store, steps = RagStore.objects.get(name=STORE_NAME), {}
        fill_seconds = generate_seconds + sum(steps.values())
        print(
            f"{'filled' if steps else 'reused'} {chunk_count} chunks ({clusters} clusters, {VOCABULARY} words, "
            f"Zipf s={ZIPF_EXPONENT}, index_config {store.index_config}) in "
            f"{fill_seconds:.1f}s: generate {generate_seconds:.1f}s, "
            + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in steps.items())
        )

        queries = synthetic_texts(rng, words, cdf, query_count, WORDS_PER_QUERY)
        anchors = rng.choice(chunk_count, size=query_count, replace=False)
        query_vectors = near_copies(rng, vectors[anchors])
        expected = [exact_neighbours(vectors, chunk_ids, q, RECALL_AT) for q in query_vectors]
        ef_search = max(settings.HNSW_EF_SEARCH_MIN, 4 * 3 * TOP_K)
        load = os.getloadavg()
        print(
            f"{query_count} queries of {WORDS_PER_QUERY[0]}-{WORDS_PER_QUERY[1]} words, top_k {TOP_K}; "
            f"HNSW path: {chunk_count > settings.VECTOR_EXACT_SCAN_MAX_CHUNKS}, ef_search {ef_search}; "
            f"load average {load[0]:.2f}"
        )

        queries_of = {
            "typical": queries,
            **issue_queries(rng, words, cdf, texts, query_count, indexed_common(store, words)),
        }
        vector_lists = [q.tolist() for q in query_vectors]
        results, recall_at_10, observe_ms = [], None, []
        runs = [
            (name, configuration)
            for name in args.classes
            for configuration in configurations_of(name)
            if not (args.skip_fulltext and configuration[1] == "pgvector")
        ]
        # The slow full-text configurations go last, so the others are measured close together.
        for query_class, (mode, backend) in sorted(runs, key=lambda run: run[1][1] == "pgvector"):
            with timing_metrics(observe_ms):
                search_ms, raw_ms, hits = measure_configuration(
                    store, queries_of[query_class], vector_lists, mode, backend, CLASS_OVERRIDES.get(query_class, {})
                )
            if mode == "vector":
                recall_at_10 = recall([h[:RECALL_AT] for h in hits], expected)
            entry = {
                "class": query_class,
                "mode": mode,
                "backend": backend,
                "p50_ms": round(percentile(search_ms, 50), 3),
                "p95_ms": round(percentile(search_ms, 95), 3),
                "raw_p50_ms": round(percentile(raw_ms, 50), 3),
                "raw_p95_ms": round(percentile(raw_ms, 95), 3),
                "overhead_p50_ms": round(percentile(search_ms, 50) - percentile(raw_ms, 50), 3),
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
            results.append(entry)
        results.sort(key=lambda e: runs.index((e["class"], (e["mode"], e["backend"]))))
        timings = ("p50_ms", "p95_ms", "raw_p50_ms", "raw_p95_ms", "overhead_p50_ms")
        rows = [
            (e["class"], e["mode"], e["backend"] or "-", *(f"{e[k]:.2f}" for k in timings), e["load_average_1m"])
            for e in results
        ]
        # A typo-tolerant class searches the corrected query, not the one full scoring would read.
        overlap = {
            name: round(top_overlap(store, queries_of[name][:OVERLAP_QUERIES]), 4)
            for name in args.classes
            if not CLASS_OVERRIDES.get(name, {}).get("typo_tolerance")
        }

        sweep = ef_sweep(store, query_vectors, expected, chunk_count) if "typical" in args.classes else []

        print_table(
            rows,
            (
                "class",
                "mode",
                "backend",
                "p50 ms",
                "p95 ms",
                "raw p50 ms",
                "raw p95 ms",
                "overhead p50 ms",
                "load after",
            ),
        )
        print(
            f"lexical bm25 top {TOP_K} against full scoring (first {OVERLAP_QUERIES} queries of each class): "
            + ", ".join(f"{name} {share:.4f}" for name, share in overlap.items())
        )
        if recall_at_10 is not None:
            print(
                f"HNSW recall@{RECALL_AT} (vector mode against exact search): {recall_at_10:.4f} "
                f"at ef_search {ef_search}"
            )
        if sweep:
            print_table(
                [(r["ef_search"], r["recall@10"], f"{r['p50_ms']:.2f}", f"{r['p95_ms']:.2f}") for r in sweep],
                ("ef_search", "recall@10", "raw p50 ms", "raw p95 ms"),
            )
        print(f"metrics.observe inside the search function (in process): p50 {percentile(observe_ms, 50):.3f} ms")
        report(
            {
                "chunks": chunk_count,
                "queries": query_count,
                "results": results,
                "hnsw_recall@10": None if recall_at_10 is None else round(recall_at_10, 4),
                "bm25_top10_overlap": overlap,
                "ef_search": ef_search,
                "ef_sweep": sweep,
                "metrics_observe_p50_ms": round(percentile(observe_ms, 50), 3),
                "index_config": store.index_config,
                "fill_seconds": round(fill_seconds, 1),
                "fill_steps_seconds": {name: round(seconds, 1) for name, seconds in steps.items()},
                "load_average_1m": round(load[0], 2),
            }
        )


if __name__ == "__main__":
    main()
