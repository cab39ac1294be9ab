"""Quality at scale on real text: judged collections mixed into a large store of real English
prose, their questions scored at the defaults and with exact BM25 scoring, and hybrid latency
per query class on the same store.

    python bench/scale_quality.py [--sizes N ...] [--collections DIR ...] [--prose debian|python]
                                  [--vectors real|modelled] [--queries Q] [--smoke] [--keep DIR]
    python bench/scale_quality.py --reuse DIR

The store holds the judged collections' documents (default: bench/data/time and
bench/data/lisa, whichever exist), each chunked as an upload `<_id>.txt` is (the product's
parser and chunker, the store's default settings), and prose documents filling it up to each of
``--sizes`` chunks in turn (default 10,000, 30,000, 100,000; the judged chunks count). The prose
is documentation no one here wrote, read from Debian packages (``--prose debian``, at least
PROSE_MIN_MB of it; `make bench-prose` installs them, DEBIAN_PROSE lists them): the Linux
kernel's and Python's documentation (reStructuredText sources and plain text), PostgreSQL's and
SQLite's HTML manuals, Perl's POD pages, Git's AsciiDoc manual and Node.js's Markdown API
reference, each file uploaded as the product would parse it (`.txt`, `.html` or `.md`).
The order of the prose documents is drawn from ``--seed``. ``--prose python`` reads the
documentation topics that ship with CPython itself (`pydoc_data`, about 0.5 MB): what the smoke
run uses, on any machine.

Embeddings: the judged chunks, the questions and one prose chunk in ANCHOR_EVERY of each prose
document (its anchors) are embedded by the store's local model in this process; every other
prose chunk gets a modelled vector, its document's nearest preceding anchor plus Gaussian noise
(search_latency.vectors_around), so prose chunks cluster by topic around real embeddings of
their own text. The lexical figures do not depend on vectors at all and are exact; the vector
and hybrid figures use those modelled prose vectors. Embeddings are cached in
bench/results/scale_quality/ (gitignored), keyed by text and written as they are made, so a
rerun or an interrupted run embeds nothing twice (not by the smoke run). ``--vectors modelled``
embeds nothing (on a busy machine the model runs a few texts a second, and the judged
collections alone are thousands of chunks): every vector is random, prose still clustered by
document, and only the lexical quality rows are reported; latency is measured as usual.

At each size, for each collection's judged questions (documents ranked at their best chunk,
pools of 100 chunks, as bench/quality.py ranks): nDCG@10 and recall@100 of vector, lexical bm25
and hybrid bm25 at the defaults, and of lexical and hybrid bm25 with exact scoring (a posting
budget no query reaches: every posting of every query term read, the bounded pass is full
scoring), with each default − exact difference and its paired 95 % interval, and every row's
search milliseconds. At the largest size: hybrid bm25 latency (search_latency.py's query classes
drawn from the prose's own vocabulary and word frequencies, and ``questions``, the judged
questions themselves with their real vectors), and lexical bm25's top-10 overlap with full
scoring per class. The synthetic classes' query vectors are near copies of prose chunks' vectors.
``--keep DIR`` keeps the store's database (the embedded PostgreSQL's data folder) in DIR
with the latency phase's queries and vectors; ``--reuse DIR`` then runs only the latency phase
on it: fill on a busy machine, measure latency in a quiet window.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from harness import (
    REPO,
    BenchEnvironment,
    fresh_store,
    load_beir,
    load_embedding_cache,
    local_connection,
    print_table,
    report,
    save_embedding_cache,
)
from lexical_suspects import Chunks, embed, upload_chunks
from quality import HEADLINE, HEADLINE_OVERRIDES, LEXICAL_OVERRIDES, compare, evaluate, patched, ragmux_rankings
from search_latency import (
    CLASS_OVERRIDES,
    DIMENSIONS,
    OVERLAP_QUERIES,
    WORDS_PER_QUERY,
    fill_store,
    indexed_common,
    issue_queries,
    measure_configuration,
    near_copies,
    synthetic_texts,
    top_overlap,
    unit_rows,
    vectors_around,
)

from retrieval.evaluation.scores import percentile


@dataclass(frozen=True)
class ProseSource:
    package: str  # the Debian package that installs the files
    pattern: str  # a recursive glob of its files
    upload_as: str  # the file type the product parses each file as


# Debian 12's names. A `.gz` file is read decompressed.
DEBIAN_PROSE = (
    ProseSource("linux-doc-6.1", "/usr/share/doc/linux-doc-6.1/html/_sources/**/*.txt", ".txt"),
    ProseSource("linux-doc-6.1", "/usr/share/doc/linux-doc-6.1/Documentation/**/*.txt.gz", ".txt"),
    ProseSource("python3.11-doc", "/usr/share/doc/python3.11/html/_sources/**/*.txt", ".txt"),
    ProseSource("postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html/*.html", ".html"),
    ProseSource("sqlite3-doc", "/usr/share/doc/sqlite3/**/*.html", ".html"),
    ProseSource("perl-doc", "/usr/share/perl/5.*/pod/*.pod", ".txt"),
    ProseSource("git-doc", "/usr/share/doc/git-doc/**/*.txt", ".txt"),
    ProseSource("nodejs-doc", "/usr/share/doc/nodejs/api/*.md.gz", ".md"),
)
PYTHON_PROSE = "pydoc_data (CPython's documentation topics)"
PROSE_MIN_MB = 50  # issue 40: at least this much text no one here wrote
DEFAULT_SIZES = (10000, 30000, 100000)
DEFAULT_COLLECTIONS = ("time", "lisa")
SMOKE_SIZE = 300
SMOKE_COLLECTION = REPO / "tests" / "bench" / "data" / "tiny-beir"
ANCHOR_EVERY = 25
SAVE_EVERY = 1024  # new embeddings between two writes of the cache
VOCABULARY = 30000  # the query classes draw from the prose's this many most frequent words
WORD = re.compile(r"[a-z]{2,}")
STORE_NAME = "bench-scale-quality"
KEPT_QUERIES = "latency-queries.json"  # in a --keep folder: the latency phase's queries and vectors
CACHE = REPO / "bench" / "results" / "scale_quality"
# Full scoring: a posting budget no query reaches, so the bounded pass reads every posting.
EXACT = {("retrieval.bm25", "BM25_POSTING_BUDGET"): 2**62}
EXACT_SUFFIX = ", exact (every posting read)"
# (row, search overrides, module constants patched for its searches)
QUALITY_ROWS = [
    ("vector", {"mode": "vector"}, {}),
    ("lexical bm25", LEXICAL_OVERRIDES, {}),
    ("lexical bm25" + EXACT_SUFFIX, LEXICAL_OVERRIDES, EXACT),
    (HEADLINE, HEADLINE_OVERRIDES, {}),
    (HEADLINE + EXACT_SUFFIX, HEADLINE_OVERRIDES, EXACT),
]
QUESTIONS = "questions"  # the latency class of the judged questions themselves


@dataclass
class Judged:
    name: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]  # judged documents named by their source in the store
    vectors: dict[str, list[float]]
    documents: int


# --- the prose ------------------------------------------------------------------------------


def prose_uploads(kind: str) -> tuple[list[tuple[str, str, bytes]], dict[str, dict]]:
    """(source, filename, bytes) of every prose file, and per package its files and megabytes.
    Exits naming the Debian packages to install when there is too little."""
    if kind == "python":
        from pydoc_data.topics import topics

        uploads = [(f"pydoc:{name}", f"{name}.txt", text.encode()) for name, text in sorted(topics.items())]
        return uploads, {PYTHON_PROSE: {"files": len(uploads), "mb": megabytes(uploads)}}
    uploads, packages, seen = [], {}, set()
    for source in DEBIAN_PROSE:
        paths = []
        for path in sorted(glob.glob(source.pattern, recursive=True)):
            # A file reached twice through a link (perl's 5.36 -> 5.36.0) counts once.
            if os.path.realpath(path) not in seen:
                seen.add(os.path.realpath(path))
                paths.append(path)
        found = [
            (f"{source.package}:{path}", Path(path.removesuffix(".gz")).stem + source.upload_as, read_file(path))
            for path in paths
        ]
        uploads += found
        package = packages.setdefault(source.package, {"files": 0, "mb": 0.0})
        package.update(files=package["files"] + len(found), mb=round(package["mb"] + megabytes(found), 1))
    total = sum(package["mb"] for package in packages.values())
    if total < PROSE_MIN_MB:
        missing = [name for name, package in packages.items() if not package["files"]]
        raise SystemExit(
            f"only {total:.1f} MB of prose found (at least {PROSE_MIN_MB} needed); install the Debian packages "
            f"{' '.join(missing or [s.package for s in DEBIAN_PROSE])} (`make bench-prose` installs them all), "
            "or run with --prose python for a small run"
        )
    return uploads, packages


def read_file(path: str) -> bytes:
    data = Path(path).read_bytes()
    return gzip.decompress(data) if path.endswith(".gz") else data


def megabytes(uploads: list[tuple[str, str, bytes]]) -> float:
    return round(sum(len(data) for _, _, data in uploads) / 1e6, 1)


def document_spans(sources: list[str]) -> list[tuple[str, int, int]]:
    """(source, first chunk, chunk count) of each document, a document's chunks being consecutive."""
    spans, start = [], 0
    for n in range(1, len(sources) + 1):
        if n == len(sources) or sources[n] != sources[start]:
            spans.append((sources[start], start, n - start))
            start = n
    return spans


def take(documents: Iterator[tuple[str, int, int]], count: int) -> list[tuple[str, int, int]]:
    """The next documents holding ``count`` chunks in all, the last one cut short (the rest of it
    is never used)."""
    taken = []
    while count > 0:
        source, first, length = next(documents, (None, 0, 0))
        if source is None:
            break
        taken.append((source, first, min(length, count)))
        count -= taken[-1][2]
    return taken


def modelled_vectors(
    chunks: Chunks, spans: list[tuple[str, int, int]], rng: np.random.Generator, embedder: Embedder
) -> np.ndarray:
    """Vectors of the spans' chunks, in order: every ANCHOR_EVERY-th chunk of a document embedded
    by the model, each chunk its anchor's vector plus noise."""
    anchors, owner = [], []
    for _, first, length in spans:
        for offset in range(length):
            if offset % ANCHOR_EVERY == 0:
                anchors.append(first + offset)
            owner.append(len(anchors) - 1)
    centers = embedder([chunks.embedded[n] for n in anchors])
    return vectors_around(rng, centers, np.array(owner, dtype=np.int64))


def vocabulary(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The texts' VOCABULARY most frequent words, most frequent first, and their cumulative share."""
    counts = Counter(word for text in texts for word in WORD.findall(text.lower())).most_common(VOCABULARY)
    frequency = np.array([count for _, count in counts], dtype=np.float64)
    return np.array([word for word, _ in counts]), np.cumsum(frequency) / frequency.sum()


# --- the judged collections and the embedding cache ------------------------------------------


def judged_collections(folders: list[Path], chunking: dict) -> tuple[Chunks, list[Judged]]:
    """The collections' chunks (sources `<collection>:<_id>`) and their questions."""
    uploads, collections = [], []
    for folder in folders:
        corpus, queries, qrels = load_beir(folder)
        name = folder.name
        uploads += [(f"{name}:{u[0]}", u[1], u[2]) for u in beir_uploads(corpus)]
        judged = {query_id: {f"{name}:{doc}": gain for doc, gain in docs.items()} for query_id, docs in qrels.items()}
        collections.append(Judged(name, {q: queries[q] for q in judged}, judged, {}, len(corpus)))
    return upload_chunks(uploads, **chunking), collections


def beir_uploads(corpus: list[dict]) -> Iterator[tuple[str, str, bytes]]:
    from harness import document_text

    return ((doc["_id"], f"{doc['_id']}.txt", document_text(doc).encode()) for doc in corpus)


def cache_path() -> Path:
    from gateway.connections.providers.local_model import MODEL_NAME

    return CACHE / f"embeddings-{MODEL_NAME}.npz"


class Embedder:
    """Unit vectors of texts from the store's local model, through a cache (``path``: read first,
    written every SAVE_EVERY new texts, so an interrupted run keeps what it embedded; None: in
    memory only); with ``modelled``, random unit vectors and no model at all."""

    def __init__(self, path: Path | None, rng: np.random.Generator, *, modelled: bool):
        self.path, self.rng, self.modelled = path, rng, modelled
        self.cache = load_embedding_cache(path) if path and not modelled else {}
        self.cached = len(self.cache)

    def __call__(self, texts: list[str]) -> np.ndarray:
        if self.modelled:
            return unit_rows(self.rng.standard_normal((len(texts), DIMENSIONS))).astype(np.float32)
        missing = [text for text in dict.fromkeys(texts) if text not in self.cache]
        for start in range(0, len(missing), SAVE_EVERY):
            embed(missing[start : start + SAVE_EVERY], self.cache)
            if self.path:
                save_embedding_cache(self.cache, self.path)
            print(f"embedded {min(start + SAVE_EVERY, len(missing))} of {len(missing)} texts", flush=True)
        return embed(texts, self.cache)

    @property
    def embedded(self) -> int:
        return len(self.cache) - self.cached


# --- measuring ------------------------------------------------------------------------------


def quality_at(store, collections: list[Judged], *, lexical_only: bool) -> tuple[list[dict], list[dict]]:
    """Each collection's rows and default − exact comparisons on the store as it is; only the
    lexical ones with ``lexical_only`` (the vectors are all modelled, so no vector figure means
    anything)."""
    rows, comparisons = [], []
    measured = [row for row in QUALITY_ROWS if not lexical_only or row[1] is LEXICAL_OVERRIDES]
    for judged in collections:
        rankings = {}
        for name, overrides, patches in measured:
            latencies: list[float] = []
            with patched(patches):
                rankings[name] = ragmux_rankings(store, judged.queries, judged.vectors, overrides, latencies=latencies)
            scores = evaluate(rankings[name], judged.qrels)
            rows.append(
                {
                    "collection": judged.name,
                    "config": name,
                    **{measure: round(value, 4) for measure, value in scores.items()},
                    "p50_ms": round(percentile(latencies, 50), 1),
                    "p95_ms": round(percentile(latencies, 95), 1),
                }
            )
        for name in [name for name in ("lexical bm25", HEADLINE) if name in rankings]:
            comparisons.append(
                {"collection": judged.name, **compare(name, name + EXACT_SUFFIX, rankings, judged.qrels)}
            )
    return rows, comparisons


def latency_classes(
    store, rng, words, cdf, texts: list[str], vectors: np.ndarray, collections: list[Judged], count: int
) -> tuple[dict[str, list[str]], dict[str, list]]:
    """Queries and their vectors per class: search_latency's classes drawn from the prose's
    words (vectors near prose chunks'), and the judged questions with their own vectors."""
    queries = {"typical": synthetic_texts(rng, words, cdf, count, WORDS_PER_QUERY)}
    queries.update(issue_queries(rng, words, cdf, texts, count, indexed_common(store, words)))
    anchors = near_copies(rng, vectors[rng.choice(len(texts), size=count, replace=len(texts) < count)])
    query_vectors = {name: [v.tolist() for v in anchors] for name in queries}
    questions = [(text, judged.vectors[q]) for judged in collections for q, text in judged.queries.items()]
    queries[QUESTIONS] = [text for text, _ in questions[:count]]
    query_vectors[QUESTIONS] = [vector for _, vector in questions[:count]]
    return queries, query_vectors


def hybrid_latency(store, queries: dict[str, list[str]], query_vectors: dict[str, list]) -> list[dict]:
    rows = []
    for name, texts in queries.items():
        search_ms, raw_ms, _ = measure_configuration(
            store, texts, query_vectors[name], "hybrid", "bm25", CLASS_OVERRIDES.get(name, {})
        )
        rows.append(
            {
                "class": name,
                "queries": len(texts),
                "p50_ms": round(percentile(search_ms, 50), 1),
                "p95_ms": round(percentile(search_ms, 95), 1),
                "raw_p50_ms": round(percentile(raw_ms, 50), 1),
                "raw_p95_ms": round(percentile(raw_ms, 95), 1),
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", help=f"store sizes in chunks (default {DEFAULT_SIZES})")
    parser.add_argument("--collections", type=Path, nargs="+", help="judged BEIR folders to mix in")
    parser.add_argument("--prose", choices=("debian", "python"), help="where the prose comes from (default debian)")
    parser.add_argument("--queries", type=int, help="queries per latency class (default 100; 10 with --smoke)")
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument(
        "--vectors",
        choices=("real", "modelled"),
        default="real",
        help="modelled: no embedding at all, every vector random, lexical quality rows only (default real)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_SIZE} chunks: tests/bench's tiny collection in CPython's prose"
    )
    parser.add_argument(
        "--debian-packages", action="store_true", help="print the Debian packages the prose comes from, and exit"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep the filled store's database in DIR, with the latency phase's queries, for --reuse",
    )
    parser.add_argument(
        "--reuse",
        type=Path,
        metavar="DIR",
        help="only the latency phase, on the largest store a --keep run left in DIR (nothing filled or scored)",
    )
    args = parser.parse_args()
    if args.debian_packages:
        print(" ".join(dict.fromkeys(source.package for source in DEBIAN_PROSE)))
        return
    if args.reuse:
        rerun_latency(args.reuse)
        return
    sizes = sorted(args.sizes or ([SMOKE_SIZE] if args.smoke else DEFAULT_SIZES))
    folders = args.collections or (
        [SMOKE_COLLECTION]
        if args.smoke
        else [
            REPO / "bench" / "data" / name for name in DEFAULT_COLLECTIONS if (REPO / "bench" / "data" / name).is_dir()
        ]
    )
    prose_kind = args.prose or ("python" if args.smoke else "debian")
    query_count = args.queries or (10 if args.smoke else 100)
    rng = np.random.default_rng(args.seed)

    with BenchEnvironment(data_dir=args.keep):
        from stores.models import store_defaults

        defaults = store_defaults()
        chunking = {name: defaults[name] for name in ("chunking_strategy", "chunk_size", "chunk_overlap")}
        chunking["contextual"] = defaults["contextual_chunks"]

        started = time.monotonic()
        judged_chunks, collections = judged_collections(folders, chunking)
        if judged_chunks.contents and len(judged_chunks.contents) > sizes[0]:
            raise SystemExit(f"the judged collections alone hold {len(judged_chunks.contents)} chunks, over {sizes[0]}")
        uploads, packages = prose_uploads(prose_kind)
        prose = upload_chunks(uploads, **chunking)
        del uploads
        needed = sizes[-1] - len(judged_chunks.contents)
        if len(prose.contents) < needed:
            raise SystemExit(f"the prose makes {len(prose.contents)} chunks, {needed} needed for {sizes[-1]}")
        spans = document_spans(prose.sources)
        documents = iter([spans[n] for n in rng.permutation(len(spans))])
        bounds = [len(judged_chunks.contents), *sizes]
        steps = [take(documents, size - previous) for previous, size in zip(bounds, sizes, strict=False)]
        chunk_seconds = time.monotonic() - started
        print(
            f"prose ({prose_kind}): "
            + ", ".join(f"{name} {p['files']} files {p['mb']} MB" for name, p in packages.items())
            + f"; {len(prose.contents)} chunks available; judged: "
            + ", ".join(f"{j.name} {j.documents} documents {len(j.queries)} questions" for j in collections)
            + f", {len(judged_chunks.contents)} chunks; parsed and chunked in {chunk_seconds:.0f} s"
        )

        started = time.monotonic()
        # The smoke run neither reads nor writes the cache: a test leaves nothing behind.
        embedder = Embedder(None if args.smoke else cache_path(), rng, modelled=args.vectors == "modelled")
        judged_vectors = embedder(judged_chunks.embedded)
        for judged in collections:
            texts = list(judged.queries.values())
            judged.vectors = dict(zip(judged.queries, (v.tolist() for v in embedder(texts)), strict=True))
        step_vectors = [modelled_vectors(prose, spans, rng, embedder) for spans in steps]
        embed_seconds = time.monotonic() - started
        print(f"vectors {args.vectors}: embedded {embedder.embedded} new texts in {embed_seconds:.0f} s")
        assert judged_vectors.shape[1] == DIMENSIONS

        from stores.models import Chunk

        section_length = Chunk._meta.get_field("section").max_length
        store = fresh_store(STORE_NAME, local_connection())
        results = []
        step_texts = [
            [prose.contents[first + n] for _, first, length in spans for n in range(length)] for spans in steps
        ]
        for number, (size, spans, texts, vectors) in enumerate(
            zip(sizes, steps, step_texts, step_vectors, strict=True)
        ):
            sections = [prose.sections[first + n] for _, first, length in spans for n in range(length)]
            names = [(source, length) for source, _, length in spans]
            if number == 0:  # the judged documents go in with the first step
                texts = judged_chunks.contents + texts
                sections = judged_chunks.sections + sections
                names = [(source, length) for source, _, length in document_spans(judged_chunks.sources)] + names
                vectors = np.vstack([judged_vectors, vectors])
            # A heading path longer than the column holds would fail the document's index write
            # (in the pipeline too: a `<title>` or heading of over 1024 characters); cut here.
            sections = [section[:section_length] for section in sections]
            started = time.monotonic()
            _, fill_steps = fill_store(store, texts, vectors, documents=names, sections=sections)
            fill_seconds = time.monotonic() - started
            rows, comparisons = quality_at(store, collections, lexical_only=args.vectors == "modelled")
            results.append(
                {
                    "chunks": size,
                    "fill_seconds": round(fill_seconds, 1),
                    "load_average_1m": round(os.getloadavg()[0], 2),
                    "quality": rows,
                    "comparisons": comparisons,
                }
            )
            print(
                f"{size} chunks: filled in {fill_seconds:.0f} s ("
                + ", ".join(f"{k} {v:.0f} s" for k, v in fill_steps.items())
                + f"); load {os.getloadavg()[0]:.2f}"
            )
            print_table(
                [
                    (
                        r["collection"],
                        r["config"],
                        f"{r['ndcg@10']:.4f}",
                        f"{r['recall@100']:.4f}",
                        r["p50_ms"],
                        r["p95_ms"],
                    )
                    for r in rows
                ],
                ("collection", "config", "nDCG@10", "recall@100", "p50 ms", "p95 ms"),
            )
            for c in comparisons:
                print(
                    f"{c['collection']}: {c['config']} − exact: {c['ndcg@10_difference']:+.4f} nDCG@10, "
                    f"95 % CI [{c['ci95'][0]:+.4f}, {c['ci95'][1]:+.4f}]"
                )

        prose_texts = [text for texts in step_texts for text in texts]
        words, cdf = vocabulary(prose_texts)
        queries, query_vectors = latency_classes(
            store, rng, words, cdf, prose_texts, np.vstack(step_vectors), collections, query_count
        )
        if args.keep:
            (args.keep / KEPT_QUERIES).write_text(
                json.dumps({"chunks": sizes[-1], "queries": queries, "query_vectors": query_vectors})
            )
        latency, overlap = latency_phase(store, queries, query_vectors, sizes[-1])
        report(
            {
                "bench": "scale_quality",
                "prose": {
                    "kind": prose_kind,
                    "packages": packages,
                    "chunks_available": len(prose.contents),
                    "chunk_text_mb_in_store": round(sum(len(text.encode()) for text in prose_texts) / 1e6, 1),
                },
                "judged": {j.name: {"documents": j.documents, "questions": len(j.queries)} for j in collections},
                "judged_chunks": len(judged_chunks.contents),
                "prose_vectors": f"modelled: one embedded anchor per {ANCHOR_EVERY} chunks of a document, plus noise",
                "vectors": args.vectors,
                "embedded_new": embedder.embedded,
                "sizes": results,
                "latency": {"chunks": sizes[-1], "mode": "hybrid", "backend": "bm25", "classes": latency},
                "bm25_top10_overlap": overlap,
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
        )


def latency_phase(store, queries: dict[str, list[str]], query_vectors: dict[str, list], chunks: int):
    """Hybrid bm25 latency per class and lexical bm25's top-10 overlap with full scoring, printed."""
    latency = hybrid_latency(store, queries, query_vectors)
    overlap = {
        name: round(top_overlap(store, texts[:OVERLAP_QUERIES]), 4)
        for name, texts in queries.items()
        if not CLASS_OVERRIDES.get(name, {}).get("typo_tolerance")
    }
    print(f"hybrid bm25 latency at {chunks} chunks (load average {os.getloadavg()[0]:.2f}):")
    print_table(
        [(r["class"], r["queries"], r["p50_ms"], r["p95_ms"], r["raw_p50_ms"], r["raw_p95_ms"]) for r in latency],
        ("class", "queries", "p50 ms", "p95 ms", "raw p50 ms", "raw p95 ms"),
    )
    print(
        f"lexical bm25 top 10 against full scoring (first {OVERLAP_QUERIES} queries of each class): "
        + ", ".join(f"{name} {share:.4f}" for name, share in overlap.items())
    )
    return latency, overlap


def rerun_latency(folder: Path) -> None:
    """The latency phase alone, on the store and with the queries a ``--keep`` run left in
    ``folder``: to measure on a quiet machine a store filled when it was not."""
    kept = json.loads((folder / KEPT_QUERIES).read_text())
    with BenchEnvironment(data_dir=folder):
        from stores.models import RagStore

        store = RagStore.objects.get(name=STORE_NAME)
        latency, overlap = latency_phase(store, kept["queries"], kept["query_vectors"], kept["chunks"])
        report(
            {
                "bench": "scale_quality",
                "reused": str(folder),
                "latency": {"chunks": kept["chunks"], "mode": "hybrid", "backend": "bm25", "classes": latency},
                "bm25_top10_overlap": overlap,
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
        )


if __name__ == "__main__":
    main()
