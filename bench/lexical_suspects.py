"""Where the lexical leg's points go (issue 16): each suspect measured on its own, over the
product's own chunks, with bm25s as the scorer so only the suspect changes between rows.

    python bench/lexical_suspects.py [--dataset DIR] [--smoke] [--dense-variants]

Issue 16 found the store's lexical `bm25` below a naive bm25s over plain character windows
with `\\w+` tokens. This script takes the product apart and measures one suspect per row, at
document level (nDCG@10, a document ranks at its best chunk, candidate pools of 100 chunks):

- Chunks are what the pipeline stores for each document at the store's defaults, made here in
  process (no ingestion, no worker): `parse_text` of the document's text as a `<_id>.txt`
  upload, then `chunk_blocks`. Empty documents give no chunks and a document repeating an
  earlier one's bytes is left out, as the upload refuses it.
- The lexical side is bm25s (Lucene BM25, k1 1.2, b 0.75 unless the row says otherwise) over the
  row's tokens: the lexemes of PostgreSQL's `to_tsvector` (the embedded database the bench
  starts), a lexeme repeated once per position, as the product's index counts them. Query terms
  come from `positive_text(query)` and count once each, as the product counts them, unless the
  row says otherwise. The "simple" row is the product with `index_config` simple, punctuation
  as a word break (`lexical_text`) before `to_tsvector('simple', …)`, and the row every suspect
  varies; the "english" row is the product at its default since issue 16. Each must reproduce
  the product's lexical bm25 of bench/quality.py under its configuration.
- The dense side is exact cosine over the same chunks embedded by the store's local model in
  process, each chunk as the pipeline embeds it (`embedded_text`, with the contextual header),
  each query alone as a search embeds it. Hybrid is plain RRF (k 60) of the two sides' top 100
  chunks, fused at chunk level, the first 100 kept, then collapsed to documents.
- Chunking variants change both sides; re-embedding each one costs minutes on a small machine,
  so they report the lexical side only unless `--dense-variants` is given (a text embedded once
  is not embedded again).
- The naive rows of bench/quality.py (windows and whole documents, lowercase `\\w+` tokens, fused
  at document level with the dense side) are the reference the issue measured against.

Prints a table (row, lexical nDCG@10, hybrid nDCG@10 or "—"); the last line is one JSON object
with every figure, each row's paired difference from "simple" (bootstrap 95 % interval) included.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from harness import DEFAULT_DATASET, BenchEnvironment, document_text, load_beir, print_table, report
from quality import (
    EMBED_BATCH,
    NAIVE_WHOLE,
    NAIVE_WINDOWS,
    RRF_K,
    SMOKE_DOCUMENTS,
    SMOKE_QUERIES,
    bm25s_index,
    bm25s_top,
    evaluate,
    evaluation_set,
    exact_dense_rankings,
    naive_rankings,
    naive_whole_documents,
    naive_windows,
    per_query_ndcg,
    reciprocal_rank_fusion,
    unit_rows,
)

from retrieval.evaluation.scores import POOL, collapse_to_documents, paired_bootstrap

K1 = 1.2
B = 0.75
BEFORE = "PostgreSQL parser, simple (before issue 16)"
SIMPLE = "punctuation as word break, simple"
ENGLISH = "punctuation as word break, english (the default)"
DENSE_ONLY = "dense only (no lexical side)"
# (row, k1, b) on the "simple" tokens.
PARAMETER_ROWS = [
    ("simple, k1 1.5", 1.5, B),
    ("simple, k1 2.0", 2.0, B),
    ("simple, b 0.5", K1, 0.5),
    ("simple, b 0.9", K1, 0.9),
]
# (row, the largest share of chunks a query term may appear in and still be kept).
DOCUMENT_FREQUENCY_ROWS = [
    ("simple, query terms in > 50 % of chunks dropped", 0.5),
    ("simple, query terms in > 20 % of chunks dropped", 0.2),
]
# (row, chunking settings replacing the store's defaults); tokens as "simple".
CHUNKING_ROWS = [
    ("simple, chunk_overlap 0", {"chunk_overlap": 0}),
    ("simple, chunk_size 2000", {"chunk_size": 2000}),
    ("simple, chunk_size 5000 (one chunk per document)", {"chunk_size": 5000}),
    ("simple, chunking_strategy semantic", {"chunking_strategy": "semantic"}),
    ("simple, chunking_strategy character (windows)", {"chunking_strategy": "character"}),
]
# Informative only: the fusion constant is fixed by the seed.
RRF_K_ROWS = [("simple, RRF k 20 (informative)", 20), ("simple, RRF k 100 (informative)", 100)]


@dataclass
class Chunks:
    """Chunks as the pipeline would store them: the source each came from, its content and
    section, and the text the pipeline embeds for it."""

    sources: list[str] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    embedded: list[str] = field(default_factory=list)

    @property
    def ids(self) -> np.ndarray:
        return np.arange(len(self.contents), dtype=np.int64)

    def documents(self, ranking: Sequence[int]) -> list[str]:
        return collapse_to_documents(self.sources[n] for n in ranking)


def product_chunks(
    corpus: list[dict], *, chunking_strategy: str, chunk_size: int, chunk_overlap: int, contextual: bool
):
    """Each document as an upload `<_id>.txt` of its text, parsed and chunked as the pipeline does."""
    uploads = ((doc["_id"], f"{doc['_id']}.txt", document_text(doc).encode()) for doc in corpus)
    return upload_chunks(
        uploads,
        chunking_strategy=chunking_strategy,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        contextual=contextual,
    )


def upload_chunks(
    uploads: Iterable[tuple[str, str, bytes]],
    *,
    chunking_strategy: str,
    chunk_size: int,
    chunk_overlap: int,
    contextual: bool,
) -> Chunks:
    """Each (source, filename, bytes) upload parsed by its filename's type and chunked as the
    pipeline does. An upload the pipeline would fail (no text) or refuse (the bytes of an earlier
    one) gives no chunks."""
    from django.conf import settings

    from ingestion.chunking import chunk_blocks, embedded_text
    from ingestion.parsing import ParseError, parse_document

    chunks = Chunks()
    seen = set()
    for source, filename, data in uploads:
        digest = hashlib.sha256(data).hexdigest()
        if not data or digest in seen:
            continue
        seen.add(digest)
        try:
            parsed = parse_document(filename=filename, data=data, pdf_timeout=settings.PDF_PARSE_TIMEOUT)
        except ParseError:
            continue
        drafts = chunk_blocks(
            parsed.blocks, strategy=chunking_strategy, chunk_size=chunk_size, chunk_overlap=chunk_overlap
        )
        for draft in drafts:
            chunks.sources.append(source)
            chunks.contents.append(draft.content)
            chunks.sections.append(draft.section)
            chunks.embedded.append(
                embedded_text(filename=filename, section=draft.section, content=draft.content, contextual=contextual)
            )
    return chunks


def lexeme_streams(texts: Sequence[str], config: str, prepare: Callable[[str], str] = lambda text: text):
    """Each text's lexemes under the text search ``config`` (of ``prepare(text)``), a lexeme once
    per position, in position order: the term frequencies and lengths the product's index holds."""
    from django.db import connection

    streams: list[list[str]] = [[] for _ in texts]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT x.n, t.lexeme FROM unnest(%s::text[]) WITH ORDINALITY AS x(text, n), "
            "unnest(to_tsvector(%s::regconfig, x.text)) AS t, unnest(t.positions) AS p ORDER BY x.n, p",
            [[prepare(text) for text in texts], config],
        )
        for n, lexeme in cursor.fetchall():
            streams[n - 1].append(lexeme)
    return streams


def distinct(terms: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(terms))


def bm25_rankings(tokens: list[list[str]], query_terms: dict[str, list[str]], *, k1: float = K1, b: float = B):
    """Top ``POOL`` chunk positions by bm25s (Lucene) for each query."""
    if (k1, b) == (K1, B):
        retriever = bm25s_index(tokens)
    else:
        import bm25s

        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        retriever.index(tokens, show_progress=False)
    ids = np.arange(len(tokens), dtype=np.int64)
    return {
        query_id: bm25s_top(retriever, ids, [term for term in terms if term in retriever.vocab_dict])
        for query_id, terms in query_terms.items()
    }


def fused(dense: dict[str, list], lexical: dict[str, list], k: int = RRF_K) -> dict[str, list]:
    return {query_id: reciprocal_rank_fusion([dense[query_id], lexical[query_id]], k)[:POOL] for query_id in dense}


def embed(texts: Sequence[str], cache: dict[str, list[float]]) -> np.ndarray:
    """Unit vectors of ``texts`` from the store's local model, in batches as the quality bench's
    reference embeds; a text in ``cache`` is not embedded again."""
    from gateway.connections.providers.local_model import local_model

    missing = distinct(text for text in texts if text not in cache)
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        cache.update(zip(batch, local_model().embed(batch)[0], strict=True))
    return unit_rows(np.asarray([cache[text] for text in texts], dtype=np.float32).reshape(len(texts), -1))


class Study:
    """The rows, scored as they are added."""

    def __init__(self, qrels: dict[str, dict[str, int]]):
        self.qrels = qrels
        self.rows: list[dict] = []
        self.per_query: dict[tuple[str, str], list[float]] = {}

    def add(self, name: str, lexical: dict[str, list[str]] | None, hybrid: dict[str, list[str]] | None, **extra):
        row = {"row": name}
        for side, rankings in (("lexical", lexical), ("hybrid", hybrid)):
            row[side] = None if rankings is None else round(evaluate(rankings, self.qrels)["ndcg@10"], 4)
            if rankings is not None:
                self.per_query[name, side] = per_query_ndcg(rankings, self.qrels)
        self.rows.append({**row, **extra})

    def differences_from(self, reference: str) -> None:
        """Each row's paired nDCG@10 difference from ``reference``, side by side, with its 95 % interval."""
        for row in self.rows:
            for side in ("lexical", "hybrid"):
                ours, theirs = self.per_query.get((row["row"], side)), self.per_query.get((reference, side))
                if row["row"] == reference or ours is None or theirs is None:
                    continue
                difference = paired_bootstrap(ours, theirs)
                row[f"{side}_vs_simple"] = {
                    "difference": round(difference.mean, 4),
                    "ci95": [round(difference.low, 4), round(difference.high, 4)],
                }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"tiny run to check the script works ({SMOKE_DOCUMENTS} documents, up to {SMOKE_QUERIES} queries)",
    )
    parser.add_argument(
        "--dense-variants",
        action="store_true",
        help="re-embed each chunking variant's chunks for its hybrid figure (minutes per variant)",
    )
    args = parser.parse_args()
    started = time.monotonic()

    with BenchEnvironment():
        from gateway.connections.providers.local_model import MODEL_NAME, local_model
        from retrieval.ranking import positive_text
        from stores.lexical import lexical_text
        from stores.models import store_defaults

        defaults = store_defaults()
        chunking = {name: defaults[name] for name in ("chunking_strategy", "chunk_size", "chunk_overlap")}
        contextual = defaults["contextual_chunks"]
        corpus, queries, qrels = load_beir(args.dataset, limit=SMOKE_DOCUMENTS if args.smoke else None)
        query_text, qrels = evaluation_set(queries, qrels, {doc["_id"] for doc in corpus}, args.smoke)
        chunks = product_chunks(corpus, contextual=contextual, **chunking)
        print(f"dataset {args.dataset}: {len(corpus)} documents, {len(query_text)} judged queries")
        print(
            f"store defaults: {', '.join(f'{name} {value}' for name, value in chunking.items())}, "
            f"contextual_chunks {contextual}, index_config {defaults['index_config']}; "
            f"{len(chunks.contents)} chunks; embedding model {MODEL_NAME} (local, in process)"
        )

        embedded_at = time.monotonic()
        vectors = {}
        chunk_vectors = embed(chunks.embedded, vectors)
        query_vectors = {query_id: local_model().embed([text])[0][0] for query_id, text in query_text.items()}
        embedding_seconds = time.monotonic() - embedded_at
        dense = exact_dense_rankings(chunks.ids, chunk_vectors, query_vectors)

        def documents(rankings: dict[str, list[int]], of: Chunks = chunks) -> dict[str, list[str]]:
            return {query_id: of.documents(ranking) for query_id, ranking in rankings.items()}

        def positive(prepare: Callable[[str], str] = lambda text: text) -> list[str]:
            return [prepare(positive_text(text)) for text in query_text.values()]

        def per_query(streams: list[list[str]], keep: Callable[[list[str]], list[str]] = distinct):
            return {query_id: keep(stream) for query_id, stream in zip(query_text, streams, strict=True)}

        study = Study(qrels)

        def lexical_row(
            name: str, lexical: dict[str, list[int]], of: Chunks = chunks, dense_side=dense, k=RRF_K, **extra
        ):
            hybrid = None if dense_side is None else documents(fused(dense_side, lexical, k), of)
            study.add(name, documents(lexical, of), hybrid, **extra)

        before_tokens = lexeme_streams(chunks.contents, "simple")
        lexical_row(BEFORE, bm25_rankings(before_tokens, per_query(lexeme_streams(positive(), "simple"))))

        simple_tokens = lexeme_streams(chunks.contents, "simple", lexical_text)
        simple_query_streams = lexeme_streams(positive(lexical_text), "simple")
        simple_queries = per_query(simple_query_streams)
        simple = bm25_rankings(simple_tokens, simple_queries)
        lexical_row(SIMPLE, simple)
        lexical_row(
            "simple, query terms repeated as often as they occur",
            bm25_rankings(simple_tokens, per_query(simple_query_streams, keep=list)),
        )
        for name, k1, b in PARAMETER_ROWS:
            lexical_row(name, bm25_rankings(simple_tokens, simple_queries, k1=k1, b=b))
        document_frequency = Counter(term for tokens in simple_tokens for term in set(tokens))
        for name, share in DOCUMENT_FREQUENCY_ROWS:
            kept = {
                query_id: [term for term in terms if document_frequency[term] <= share * len(simple_tokens)]
                for query_id, terms in simple_queries.items()
            }
            dropped = sorted(
                {term for terms in simple_queries.values() for term in terms} - {t for k in kept.values() for t in k}
            )
            lexical_row(name, bm25_rankings(simple_tokens, kept), dropped_terms=dropped)

        for name, changes in CHUNKING_ROWS:
            variant = product_chunks(corpus, contextual=contextual, **{**chunking, **changes})
            lexical = bm25_rankings(lexeme_streams(variant.contents, "simple", lexical_text), simple_queries)
            variant_dense = None
            if args.dense_variants:
                variant_dense = exact_dense_rankings(variant.ids, embed(variant.embedded, vectors), query_vectors)
            lexical_row(
                name,
                lexical,
                of=variant,
                dense_side=variant_dense,
                chunks=len(variant.contents),
                most_chunks_per_document=max(Counter(variant.sources).values()),
            )

        english = bm25_rankings(
            lexeme_streams(chunks.contents, "english", lexical_text),
            per_query(lexeme_streams(positive(lexical_text), "english")),
        )
        lexical_row(ENGLISH, english)

        dense_documents = documents(dense)
        for name, units in ((NAIVE_WINDOWS, naive_windows(corpus)), (NAIVE_WHOLE, naive_whole_documents(corpus))):
            naive = naive_rankings(units, query_text)
            study.add(
                name,
                naive,
                {
                    query_id: reciprocal_rank_fusion([dense_documents[query_id], naive[query_id]])[:POOL]
                    for query_id in naive
                },
            )
        study.add(DENSE_ONLY, None, dense_documents)
        for name, k in RRF_K_ROWS:
            lexical_row(name, simple, k=k)
        study.differences_from(SIMPLE)

        print(
            f"document level, candidate pools of {POOL} chunks; bm25s Lucene k1 {K1} b {B} and RRF k {RRF_K} "
            f"unless the row says otherwise; differences from {SIMPLE!r}"
        )
        print(
            f"{len(chunks.contents)} chunks and {len(query_text)} queries embedded in {embedding_seconds:.0f} s"
            + ("" if args.dense_variants else "; chunking variants: lexical only (--dense-variants to fuse them)")
        )
        print_table(
            [
                (row["row"], *("—" if row[side] is None else f"{row[side]:.4f}" for side in ("lexical", "hybrid")))
                for row in study.rows
            ],
            ("row", "lexical nDCG@10", "hybrid nDCG@10"),
        )
        report(
            {
                "bench": "lexical_suspects",
                "dataset": str(args.dataset),
                "documents": len(corpus),
                "chunks": len(chunks.contents),
                "queries": len(query_text),
                "settings": {**chunking, "contextual_chunks": contextual, "embedding_model": MODEL_NAME},
                "pool": POOL,
                "k1": K1,
                "b": B,
                "rrf_k": RRF_K,
                "dense_variants": args.dense_variants,
                "embedding_seconds": round(embedding_seconds, 1),
                "seconds": round(time.monotonic() - started, 1),
                "rows": study.rows,
            }
        )


if __name__ == "__main__":
    main()
