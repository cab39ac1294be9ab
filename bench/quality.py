"""Retrieval quality: a BEIR collection through the real pipeline into a store with default
settings, searched in each mode and backend, scored at document level (nDCG@10, recall@100)
next to in-bench baselines over the very same chunks (bm25s, exact dense, their RRF).

    python bench/quality.py [--dataset DIR] [--smoke] [--store-setting NAME=VALUE ...] [--index-config NAME]
                            [--legs FILE]

A document ranks at its best chunk: a configuration's chunk list (candidate pools of 100 per
side, the first 100 chunks kept) is collapsed to documents in order of first appearance.
Documents that failed ingestion, or were refused as duplicates of an earlier one, are never
retrieved. Every query is embedded once and the vector shared by all configurations. One
diagnostic row reruns hybrid bm25 on the queries with their websearch operators removed.

The reference rows recompute the method behind the dataset README's figures on whole
documents, with the store's embedding model, and the headline (hybrid bm25) is compared with
their RRF query by query: the difference of the means with a bootstrap 95 % confidence
interval, so a gap can be told from the noise of a few hundred queries. The headline is also
compared with vector search alone, the side fusion must lift.

The naive rows are what anyone would get without the product: bm25s over each document's
"title\ntext" cut into plain 1000-character windows (200 overlap), and over whole documents,
tokens being lowercase `\\w+` runs; and each fused (RRF at document level) with the store's own
dense side. The lexical leg must not fall below them unseen.

The reference is recomputed twice, without and with English stemming and stop words; the
headline is compared with the one that matches the store's index language (stemmed for the
default `english`).

The variant rows rerun lexical and hybrid bm25 on the same store with one behaviour taken back
(a module constant patched for those searches only): issue 21's exact BM25 pass (the posting
budget's approximation stands), and issue 40's query term counts (each query word scored once,
however often the question repeats it); so their effect shows on the same store and queries.
The bm25s baseline and the stemmed reference are recomputed with distinct query words too.

``--legs FILE`` writes each query's two legs as the hybrid search fuses them (the vector and
the lexical bm25 candidates, ``POOL`` each, with their distances and scores), every chunk's
document and the judgements, as JSON: fusion rules can then be compared without the store.

``--rerank-connection ID`` (a connection of the bench's database; ``TYPE=BASE_URL`` creates one,
e.g. ``cohere_rerank=http://127.0.0.1:9100`` for bench/openai_upstream.py, whose rerank routes
rank in reverse) adds the reranked rows: the headline and vector searches with reranking on, the
backend the connection's type implies, the store's ``rerank_candidates`` reordered at the top of
each pool, compared query by query with the same search unreranked. They are left out, saying
why, when a probe rerank cannot reach the connection; queries whose rerank fell back are counted.

``--index-config NAME`` then rebuilds the store's lexical index with that text search
configuration (timed: chunks per second) and adds its lexical and hybrid bm25 rows, with the
same paired comparisons (``--index-config simple`` shows what stemming adds).
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import numpy as np
from harness import (
    DEFAULT_DATASET,
    REPO,
    BenchEnvironment,
    document_text,
    fresh_store,
    load_beir,
    load_embedding_cache,
    local_connection,
    print_table,
    rebuild_lexical_index,
    report,
    save_embedding_cache,
    wait_for,
)
from ingest import upload_paced

from retrieval.evaluation.scores import (
    BOOTSTRAP_RESAMPLES,
    POOL,
    collapse_to_documents,
    ndcg,
    paired_bootstrap,
    recall,
)

RRF_K = 60
SMOKE_DOCUMENTS = 30
SMOKE_QUERIES = 10
INGEST_PATHS = {
    "file": "file uploads named <_id>.txt",
    "text": "text ingest titled by each document's BEIR title (file name <title>.txt)",
}
WEIGHTED = {"vector": 1.0, "lexical": 1.5}
EMBED_BATCH = 32
REFERENCE_SAVE_EVERY = 32 * EMBED_BATCH  # reference embeddings between two writes of their cache
REFERENCE_CACHE = REPO / "bench" / "results" / "quality"

HEADLINE = "hybrid bm25"  # the default store's own search, the one the acceptance figures judge
HEADLINE_OVERRIDES = {"mode": "hybrid", "backend": "bm25"}
LEXICAL_OVERRIDES = {"mode": "lexical", "backend": "bm25"}
# (name, search overrides); everything not named comes from the store's default settings.
CONFIGURATIONS: list[tuple[str, dict]] = [
    ("vector", {"mode": "vector"}),
    ("lexical pgvector (ts_rank_cd)", {"mode": "lexical", "backend": "pgvector"}),
    ("lexical bm25", LEXICAL_OVERRIDES),
    ("hybrid pgvector", {"mode": "hybrid", "backend": "pgvector"}),
    (HEADLINE, HEADLINE_OVERRIDES),
    ("hybrid bm25 + typo tolerance", {"mode": "hybrid", "backend": "bm25", "typo_tolerance": True}),
    ("hybrid bm25 weights 1:1.5", {"mode": "hybrid", "backend": "bm25", "fusion_weights": WEIGHTED}),
]
# Not a setting: the same search with the queries' websearch operators taken out, to measure what
# reading natural questions containing "OR", "-word" or quotes as websearch syntax costs.
PLAIN_WORDS = ("hybrid bm25, plain-word queries (diagnostic)", {"mode": "hybrid", "backend": "bm25"})
REFERENCE_LEXICAL = "reference bm25s, whole documents"
REFERENCE_DENSE = "reference exact dense, whole documents"
REFERENCE_FUSED = "reference rrf, whole documents"
STEMMED = ", English stemming + stop words"
STEMMED_CONFIG = "english"  # the index language the stemmed reference stands for
NAIVE_WINDOW = 1000
NAIVE_OVERLAP = 200
NAIVE_WINDOWS = f"naive bm25s, {NAIVE_WINDOW}-char windows ({NAIVE_OVERLAP} overlap), \\w+ tokens"
NAIVE_WHOLE = "naive bm25s, whole documents, \\w+ tokens"
# Issue 40's change taken back: each query word scored once, however often the question repeats
# it. The statements are cached when first built: the variant builds them afresh.
DISTINCT_WORDS_PATCHES = {
    ("retrieval.bm25", "_TERM_WEIGHT"): "ln(1 + (stats.n - st.df + 0.5) / (st.df + 0.5))",
    ("retrieval.bm25", "_bm25_statement"): lambda bm25: bm25._bm25_statement.__wrapped__,
    ("retrieval.bm25", "_bm25_exact_statement"): lambda bm25: bm25._bm25_exact_statement.__wrapped__,
}
DISTINCT_WORDS = ", distinct query words (before issue 40)"
# (name, search overrides, {(module, constant): value, or a function of the module giving it}): the
# searches again with issue 21's exact BM25 pass taken back, and with issue 40's query term counts.
VARIANTS: list[tuple[str, dict, dict]] = [
    (f"{name}{variant}", overrides, patches)
    for variant, patches in (
        (", no exact pass (posting budget only)", {("retrieval.bm25", "BM25_EXACT_POSTINGS"): 0}),
        (DISTINCT_WORDS, DISTINCT_WORDS_PATCHES),
    )
    for name, overrides in (("lexical bm25", LEXICAL_OVERRIDES), (HEADLINE, HEADLINE_OVERRIDES))
]
RANK_FUSION = ", rank fusion (RRF k 60, before issue 40's score fusion)"
# The store's `fusion: rrf` setting (the seed's weighted RRF), the rule before issue 40; no patch.
VARIANTS.append((HEADLINE + RANK_FUSION, {**HEADLINE_OVERRIDES, "fusion": "rrf"}, {}))
# Searches repeated with reranking on, given --rerank-connection.
RERANKED_CONFIGURATIONS = [(HEADLINE, HEADLINE_OVERRIDES), ("vector", {"mode": "vector"})]
# Searches repeated after the --index-config rebuild, named with the configuration.
REBUILT_CONFIGURATIONS = [("lexical bm25", LEXICAL_OVERRIDES), (HEADLINE, HEADLINE_OVERRIDES)]


# --------------------------------------------------------------------------------------------
# Evaluation: pure functions (the metrics themselves are the product's, retrieval.evaluation.scores)
# --------------------------------------------------------------------------------------------


def reciprocal_rank_fusion(rankings: Sequence[Sequence], k: int = RRF_K) -> list:
    """Plain RRF, Σ 1 / (k + rank), ties by id (chunk ids or document ids). Written here rather
    than imported from retrieval.ranking so the baseline does not share code with what it checks."""
    scores: dict = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda item: (-scores[item], item))


def top_ids(ids: np.ndarray, scores: np.ndarray, limit: int) -> list[int]:
    """The ``limit`` best-scoring ids, best first, ties by the lower id."""
    order = np.lexsort((ids, -scores))[:limit]
    return ids[order].tolist()


def per_query_ndcg(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> list[float]:
    return [ndcg(rankings.get(query_id, []), judged) for query_id, judged in qrels.items()]


def evaluate(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Means over every judged query (a missing ranking scores 0) of nDCG@10, recall@100 and the
    number of documents ranked: a pool of 100 chunks collapses to fewer than 100 documents."""
    ranked = [(rankings.get(query_id, []), judged) for query_id, judged in qrels.items()]
    return {
        "ndcg@10": sum(per_query_ndcg(rankings, qrels)) / len(ranked),
        "recall@100": sum(recall(ranking, judged) for ranking, judged in ranked) / len(ranked),
        "documents_ranked": sum(len(ranking) for ranking, _ in ranked) / len(ranked),
    }


def without_search_operators(query: str) -> str:
    """The query as plain words: no `OR`, no hyphen starting a word, no quotes."""
    words = (word.lstrip("-").replace('"', "") for word in query.split() if word != "OR")
    return " ".join(word for word in words if word)


def store_setting(text: str) -> tuple[str, object]:
    """`name=value` from the command line; the value is read as JSON when it parses."""
    name, separator, raw = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError:
        return name, raw


# --------------------------------------------------------------------------------------------
# The store and its searches
# --------------------------------------------------------------------------------------------


def ingest(store, corpus: list[dict], *, as_text: bool) -> dict[str, str]:
    """Uploads the corpus and waits until every document settled. Returns BEIR id → reason for
    the documents that can never be retrieved: the failed ones and those skipped at upload."""
    from stores.models import Document

    skipped = upload_paced(store, corpus, as_text=as_text)
    documents = Document.objects.filter(store=store)
    if not wait_for(lambda: not documents.filter(status__in=("pending", "processing")).exists(), timeout=7200):
        raise SystemExit("ingestion did not settle within two hours")
    unusable = {**skipped, **dict(documents.filter(status="failed").values_list("source", "error"))}
    return {doc["_id"]: unusable[doc["_id"]] for doc in corpus if doc["_id"] in unusable}


def store_settings(store) -> dict:
    from stores.models import STORE_SETTINGS

    store.refresh_from_db()
    values = {name: getattr(store, name) for name in STORE_SETTINGS if name != "embedding_connection_id"}
    values.update(embedding_model=store.embedding_connection.model_name, dimensions=store.dimensions)
    return values


def ragmux_rankings(
    store,
    queries: dict[str, str],
    vectors: dict[str, list[float]],
    overrides: dict,
    outcomes: list | None = None,
    latencies: list | None = None,
):
    """Each query's ranking of BEIR ids (the documents' sources) through the product's evaluation
    ranking; with reranking on in ``overrides``, each search is reranked as a dashboard search is
    (its outcome appended to ``outcomes``). Each search's milliseconds go to ``latencies``."""
    from retrieval.evaluation.ranking import pool_options, rank_documents

    options = pool_options(store, overrides)
    rankings = {}
    for query_id, text in queries.items():
        ranked = rank_documents(store=store, query=text, options=options, query_vector=vectors[query_id])
        if ranked.rerank is not None and outcomes is not None:
            outcomes.append(ranked.rerank)
        if latencies is not None:
            latencies.append(ranked.latency_ms)
        rankings[query_id] = ranked.sources
    return rankings


def rerank_connection_of(spec: str):
    """The connection ``--rerank-connection`` names: an id, or ``TYPE=BASE_URL`` to create."""
    from gateway.connections.models import ModelConnection
    from gateway.connections.services import connection_create

    if spec.isdigit():
        return ModelConnection.objects.get(pk=int(spec))
    provider_type, _, base_url = spec.partition("=")
    existing = ModelConnection.objects.filter(name=f"bench-{provider_type}").first()
    return existing or connection_create(
        name=f"bench-{provider_type}",
        provider_type=provider_type,
        base_url=base_url,
        model_name="bench-rerank",
        dimensions=None,
        api_key="",
    )


def rerank_backend_of(connection) -> str:
    from gateway.connections.models import RERANK_API_PROVIDERS

    return next((b for b, t in RERANK_API_PROVIDERS.items() if t == connection.provider_type), "llm")


def unreachable_reason(connection, backend: str) -> str:
    """Why a probe rerank of two passages fails through ``connection``; empty when it answers."""
    from gateway.connections.providers.rerank import reranker
    from ragmux.core.errors import ServiceError
    from retrieval.rerank_prompt import listwise_prompt

    try:
        reranker(connection, backend=backend, prompt=listwise_prompt).rerank("probe", ["one", "two"], top_n=2)
    except ServiceError as exc:
        return exc.message
    return ""


def reranked_name(name: str, backend: str) -> str:
    return f"{name} + rerank ({backend})"


# --------------------------------------------------------------------------------------------
# Baselines over the store's chunks
# --------------------------------------------------------------------------------------------


class StoredChunks:
    """The store's chunks as the baselines see them: ids, document sources (BEIR ids), the index's
    lexeme bags (from each chunk's tsvector, a lexeme repeated once per position) and unit-length
    vectors."""

    def __init__(self, store):
        from django.db import connection

        from stores.models import Chunk
        from stores.vector_tables import table_name

        rows = list(Chunk.objects.filter(store=store).order_by("id").values_list("id", "document__source"))
        self.ids = np.array([chunk_id for chunk_id, _ in rows], dtype=np.int64)
        self.source = dict(rows)
        position = {chunk_id: n for n, chunk_id in enumerate(self.ids.tolist())}
        self.lexemes: list[list[str]] = [[] for _ in rows]
        self.vectors = np.zeros((len(rows), store.dimensions), dtype=np.float32)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.id, t.lexeme, array_length(t.positions, 1) FROM chunks c, unnest(c.tsv) t "
                "WHERE c.store_id = %s",
                [store.pk],
            )
            for chunk_id, lexeme, count in cursor.fetchall():
                self.lexemes[position[chunk_id]].extend([lexeme] * count)
            cursor.execute(
                f"SELECT chunk_id, embedding::real[] FROM {table_name(store.dimensions)} WHERE store_id = %s",
                [store.pk],
            )
            for chunk_id, vector in cursor.fetchall():
                self.vectors[position[chunk_id]] = vector
        self.vectors = unit_rows(self.vectors)

    def documents(self, chunk_ids: Iterable[int]) -> list[str]:
        return collapse_to_documents(self.source[chunk_id] for chunk_id in chunk_ids)


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def bm25s_index(corpus_tokens):
    """A bm25s index (Lucene BM25, k1 1.2, b 0.75) of token lists or of `bm25s.tokenize` output."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # its index-building chatter is not a result
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index(corpus_tokens, show_progress=False)
    return retriever


def bm25s_top(retriever, ids: np.ndarray, query_terms: list) -> list[int]:
    """The best ``POOL`` ids by BM25 for terms the index knows; items matching none are left out."""
    if not query_terms:
        return []
    scores = retriever.get_scores(query_terms)
    matching = scores > 0
    return top_ids(ids[matching], scores[matching], POOL)


def exact_dense_rankings(ids: np.ndarray, unit_vectors: np.ndarray, vectors: dict[str, list[float]]):
    """Top ids by exact cosine similarity (brute force) for each query vector."""
    return {
        query_id: top_ids(ids, unit_vectors @ unit_rows(np.asarray([vector], dtype=np.float32))[0], POOL)
        for query_id, vector in vectors.items()
    }


def bm25s_chunk_rankings(chunks: StoredChunks, query_lexemes: dict[str, list[str]]) -> dict[str, list[int]]:
    """Top chunks by bm25s over the chunks' lexemes (the store's index language)."""
    retriever = bm25s_index(chunks.lexemes)
    return {
        query_id: bm25s_top(retriever, chunks.ids, [lexeme for lexeme in lexemes if lexeme in retriever.vocab_dict])
        for query_id, lexemes in query_lexemes.items()
    }


def reference_rankings(
    corpus: list[dict],
    query_text: dict[str, str],
    dense: dict[str, list[str]],
    *,
    stemmed: bool = False,
    distinct: bool = False,
) -> dict[str, dict[str, list[str]]]:
    """The reference method of the dataset's README, recomputed on whole documents (title and
    text, no chunking, no header): bm25s over its own lowercase word tokens (no stemming and no
    stop words, or with ``stemmed`` English stemming and stop words), and the RRF of its top 100
    with ``dense`` (:func:`reference_dense_rankings`). Empty documents are left out, so they are
    never retrieved. A query word counts as often as the query holds it, as bm25s scores a token
    list; with ``distinct``, once (what repeats are worth on a collection)."""
    import bm25s

    tokenize = {"stopwords": None}
    if stemmed:
        import Stemmer

        tokenize = {"stopwords": "en", "stemmer": Stemmer.Stemmer("english")}
    documents = [doc for doc in corpus if document_text(doc)]
    ids = np.arange(len(documents), dtype=np.int64)
    tokens = bm25s.tokenize([document_text(doc) for doc in documents], show_progress=False, **tokenize)
    retriever = bm25s_index(tokens)
    lexical = {}
    for query_id, text in query_text.items():
        words = bm25s.tokenize([text], show_progress=False, return_ids=False, **tokenize)[0]
        if distinct:
            words = list(dict.fromkeys(words))
        ranked = bm25s_top(retriever, ids, [tokens.vocab[word] for word in words if word in tokens.vocab])
        lexical[query_id] = [documents[n]["_id"] for n in ranked]
    fused = {query_id: reciprocal_rank_fusion([dense[query_id], lexical[query_id]])[:POOL] for query_id in dense}
    suffix = (STEMMED if stemmed else "") + (DISTINCT_WORDS if distinct else "")
    return {REFERENCE_LEXICAL + suffix: lexical, REFERENCE_FUSED + suffix: fused}


def reference_dense_rankings(
    corpus: list[dict], vectors: dict[str, list[float]], embed, cache: Path | None = None
) -> dict[str, list[str]]:
    """Exact cosine over whole documents embedded by ``embed`` (the store's model). With
    ``cache`` (an .npz, text → vector), the embeddings are read from it and each new batch of
    REFERENCE_SAVE_EVERY written back, so a rerun (or a run stopped half-way) embeds only what
    is missing: on a loaded machine this step takes longer than the rest of the bench."""
    documents = [doc for doc in corpus if document_text(doc)]
    texts = [document_text(doc) for doc in documents]
    known = load_embedding_cache(cache) if cache else {}
    missing = [text for text in dict.fromkeys(texts) if text not in known]
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        known.update(zip(batch, embed(batch), strict=True))
        if cache and (start + EMBED_BATCH) % REFERENCE_SAVE_EVERY == 0:
            save_embedding_cache(known, cache)
    if cache and missing:
        save_embedding_cache(known, cache)
    ids = np.arange(len(documents), dtype=np.int64)
    dense = exact_dense_rankings(ids, unit_rows(np.asarray([known[text] for text in texts], dtype=np.float32)), vectors)
    return {query_id: [documents[n]["_id"] for n in ranked] for query_id, ranked in dense.items()}


# --------------------------------------------------------------------------------------------
# Naive baselines: what one gets without the product
# --------------------------------------------------------------------------------------------


def word_tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def naive_windows(corpus: list[dict]) -> list[tuple[str, str]]:
    """(BEIR id, window): each document's "title\ntext" cut into plain character windows."""
    windows = []
    for doc in corpus:
        text = f"{doc.get('title', '')}\n{doc.get('text', '')}"
        if not text.strip():
            continue
        for start in range(0, len(text), NAIVE_WINDOW - NAIVE_OVERLAP):
            windows.append((doc["_id"], text[start : start + NAIVE_WINDOW]))
            if start + NAIVE_WINDOW >= len(text):
                break  # a later window would lie inside this one
    return windows


def naive_whole_documents(corpus: list[dict]) -> list[tuple[str, str]]:
    texts = ((doc["_id"], f"{doc.get('title', '')}\n{doc.get('text', '')}") for doc in corpus)
    return [(source, text) for source, text in texts if text.strip()]


def naive_rankings(units: list[tuple[str, str]], query_text: dict[str, str]) -> dict[str, list[str]]:
    """bm25s over the units' lowercase `\\w+` tokens, the query tokenised the same way; each
    document at its best unit."""
    ids = np.arange(len(units), dtype=np.int64)
    retriever = bm25s_index([word_tokens(text) for _, text in units])
    return {
        query_id: collapse_to_documents(
            units[n][0]
            for n in bm25s_top(retriever, ids, [word for word in word_tokens(text) if word in retriever.vocab_dict])
        )
        for query_id, text in query_text.items()
    }


# --------------------------------------------------------------------------------------------


def evaluation_set(text: dict[str, str], qrels: dict[str, dict[str, int]], loaded: set[str], smoke: bool):
    """(query id → text, query id → judgements) to evaluate. The smoke run keeps the first few
    queries judging a loaded document, with their judgements cut to the loaded documents."""
    if not smoke:
        return {query_id: text[query_id] for query_id in qrels}, qrels
    kept = {}
    for query_id, judged in qrels.items():
        within = {doc: gain for doc, gain in judged.items() if doc in loaded}
        if within and len(kept) < SMOKE_QUERIES:
            kept[query_id] = within
    return {query_id: text[query_id] for query_id in kept}, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"tiny run to check the script works ({SMOKE_DOCUMENTS} documents, up to {SMOKE_QUERIES} queries)",
    )
    parser.add_argument(
        "--store-setting",
        type=store_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a non-default store setting, e.g. chunk_size=6000 (repeatable; the headline figures use none)",
    )
    parser.add_argument(
        "--ingest",
        choices=sorted(INGEST_PATHS),
        default="file",
        help="how each BEIR document enters the store (default: file)",
    )
    parser.add_argument(
        "--rerank-connection",
        metavar="ID",
        help="add reranked rows through this connection (an id, or TYPE=BASE_URL to create one)",
    )
    parser.add_argument(
        "--index-config",
        metavar="NAME",
        help="then rebuild the lexical index with this text search configuration (e.g. english) and add its rows",
    )
    parser.add_argument(
        "--legs",
        type=Path,
        metavar="FILE",
        help="write each query's vector and lexical candidates (and the judgements) to FILE as JSON",
    )
    args = parser.parse_args()

    with BenchEnvironment(worker=True):
        from gateway.connections.providers.embeddings import embedding_provider
        from retrieval.ranking import positive_text, uses_websearch_syntax
        from retrieval.search import embed_query
        from retrieval.sql import query_lexemes
        from stores.lexical import lexical_text

        corpus, queries, qrels = load_beir(args.dataset, limit=SMOKE_DOCUMENTS if args.smoke else None)
        query_text, qrels = evaluation_set(queries, qrels, {doc["_id"] for doc in corpus}, args.smoke)
        store = fresh_store("bench-quality", local_connection(), **dict(args.store_setting))
        never_retrieved = ingest(store, corpus, as_text=args.ingest == "text")
        settings = store_settings(store)
        print(f"dataset {args.dataset}: {len(corpus)} documents, {len(query_text)} judged queries")
        described = (
            "defaults"
            if not args.store_setting
            else "defaults except " + ", ".join(name for name, _ in args.store_setting)
        )
        print(f"store settings ({described}): " + ", ".join(f"{name} {value}" for name, value in settings.items()))
        print(f"ingested as {INGEST_PATHS[args.ingest]}")
        for source, reason in never_retrieved.items():
            print(f"never retrieved: {source}: {reason}")

        vectors = {query_id: embed_query(store, text).vectors[0] for query_id, text in query_text.items()}
        rankings = {name: ragmux_rankings(store, query_text, vectors, overrides) for name, overrides in CONFIGURATIONS}
        plain_words = {query_id: without_search_operators(text) for query_id, text in query_text.items()}
        name, overrides = PLAIN_WORDS
        rankings[name] = ragmux_rankings(store, plain_words, vectors, overrides)
        for name, overrides, patches in VARIANTS:
            with patched(patches):
                rankings[name] = ragmux_rankings(store, query_text, vectors, overrides)
        syntax_queries = [query_id for query_id, text in query_text.items() if uses_websearch_syntax(text)]

        chunks = StoredChunks(store)
        lexemes = {
            query_id: query_lexemes(lexical_text(positive_text(text)), store.query_config)
            for query_id, text in query_text.items()
        }
        lexical = bm25s_chunk_rankings(chunks, lexemes)
        dense = exact_dense_rankings(chunks.ids, chunks.vectors, vectors)
        if args.legs:
            write_legs(args.legs, store, chunks, query_text, vectors, qrels)
        fused = {query_id: reciprocal_rank_fusion([dense[query_id], lexical[query_id]])[:POOL] for query_id in dense}
        for name, chunk_rankings in (
            ("baseline bm25s", lexical),
            ("baseline exact dense", dense),
            ("baseline rrf(bm25s, dense)", fused),
        ):
            rankings[name] = {query_id: chunks.documents(ranked) for query_id, ranked in chunk_rankings.items()}
        distinct_lexemes = {query_id: list(dict.fromkeys(found)) for query_id, found in lexemes.items()}
        rankings["baseline bm25s" + DISTINCT_WORDS] = {
            query_id: chunks.documents(ranked)
            for query_id, ranked in bm25s_chunk_rankings(chunks, distinct_lexemes).items()
        }
        for name, units in ((NAIVE_WINDOWS, naive_windows(corpus)), (NAIVE_WHOLE, naive_whole_documents(corpus))):
            rankings[name] = naive_rankings(units, query_text)
            rankings[naive_fusion_name(name)] = {
                query_id: reciprocal_rank_fusion([rankings["baseline exact dense"][query_id], ranked])[:POOL]
                for query_id, ranked in rankings[name].items()
            }
        provider = embedding_provider(store.embedding_connection)
        reference_dense = reference_dense_rankings(
            corpus,
            vectors,
            lambda texts: provider.embed(texts).vectors,
            None
            if args.smoke
            else REFERENCE_CACHE / f"reference-embeddings-{store.embedding_connection.model_name}.npz",
        )
        rankings[REFERENCE_DENSE] = reference_dense
        for stemmed, distinct in ((False, False), (True, False), (True, True)):
            rankings.update(reference_rankings(corpus, query_text, reference_dense, stemmed=stemmed, distinct=distinct))
        comparisons = [
            (HEADLINE, reference_for(store.index_config)),
            ("lexical bm25", reference_for(store.index_config, REFERENCE_LEXICAL)),
            (HEADLINE, "vector"),
            (HEADLINE, "lexical bm25"),
            (HEADLINE, HEADLINE + RANK_FUSION),
            ("lexical bm25", NAIVE_WINDOWS),
            (HEADLINE, naive_fusion_name(NAIVE_WINDOWS)),
        ]

        reranking = None
        if args.rerank_connection:
            connection = rerank_connection_of(args.rerank_connection)
            backend = rerank_backend_of(connection)
            reason = unreachable_reason(connection, backend)
            reranking = {"connection": connection.name, "backend": backend, "unreachable": reason}
            if reason:
                print(f"no reranked rows: the rerank connection {connection.name!r} cannot rerank: {reason}")
            else:
                outcomes: list = []
                on = {"rerank": True, "rerank_backend": backend, "rerank_connection_id": connection.pk}
                for name, overrides in RERANKED_CONFIGURATIONS:
                    reranked = reranked_name(name, backend)
                    rankings[reranked] = ragmux_rankings(store, query_text, vectors, {**overrides, **on}, outcomes)
                    comparisons.append((reranked, name))
                reranking.update(
                    candidates=settings["rerank_candidates"],
                    searches=len(outcomes),
                    reranked=sum(o.reranked for o in outcomes),
                    fell_back=sum(o.fallback for o in outcomes),
                    skipped=sum(o.skipped for o in outcomes),
                    median_latency_ms=float(np.median([o.latency_ms for o in outcomes])) if outcomes else None,
                )

        rebuild = None
        if args.index_config:
            rebuild = rebuild_index(store, args.index_config)
            for name, overrides in REBUILT_CONFIGURATIONS:
                rankings[rebuilt_name(name, args.index_config)] = ragmux_rankings(store, query_text, vectors, overrides)
            rebuilt_headline = rebuilt_name(HEADLINE, args.index_config)
            comparisons += [(rebuilt_headline, reference_for(args.index_config)), (rebuilt_headline, HEADLINE)]

        results = [(name, evaluate(ranked, qrels)) for name, ranked in rankings.items()]
        differences = [compare(ours, theirs, rankings, qrels) for ours, theirs in comparisons]

        print(f"{len(chunks.ids)} chunks; document level, candidate pools of {POOL} chunks")
        print(
            f"queries read as websearch syntax (`OR`, `-word` or quotes): {len(syntax_queries)} "
            f"({' '.join(syntax_queries)})"
        )
        if reranking and not reranking["unreachable"]:
            print(
                f"reranked by {reranking['connection']} ({reranking['backend']}): the top {reranking['candidates']} "
                f"of each pool; {reranking['reranked']} of {reranking['searches']} searches reranked, "
                f"{reranking['fell_back']} fell back, {reranking['skipped']} skipped; "
                f"median rerank {reranking['median_latency_ms']:.0f} ms"
            )
        if rebuild:
            print(
                f"lexical index rebuilt with {args.index_config}: {rebuild['chunks']} chunks in "
                f"{rebuild['seconds']:.2f} s ({rebuild['chunks_per_second']:.0f} chunks/s)"
            )
        print_table(
            [
                (name, f"{scores['ndcg@10']:.3f}", f"{scores['recall@100']:.3f}", f"{scores['documents_ranked']:.1f}")
                for name, scores in results
            ],
            ("config", "nDCG@10", "recall@100", "documents ranked"),
        )
        for difference in differences:
            low, high = difference["ci95"]
            print(
                f"{difference['config']} − {difference['against']}: {difference['ndcg@10_difference']:+.4f} nDCG@10, "
                f"95 % CI [{low:+.4f}, {high:+.4f}] (paired bootstrap over the {len(qrels)} queries, "
                f"{BOOTSTRAP_RESAMPLES} resamples); better on {difference['wins']} queries, "
                f"worse on {difference['losses']}"
            )
        report(
            {
                "dataset": str(args.dataset),
                "settings": settings,
                "ingest": args.ingest,
                "documents": len(corpus),
                "never_retrieved": list(never_retrieved),
                "chunks": len(chunks.ids),
                "queries": len(query_text),
                "websearch_syntax_queries": syntax_queries,
                "versus_reference": differences[0],
                "comparisons": differences,
                "rebuild": rebuild,
                "reranking": reranking,
                "results": [
                    {"config": name, **{measure: round(value, 4) for measure, value in scores.items()}}
                    for name, scores in results
                ],
            }
        )


def write_legs(path: Path, store, chunks: StoredChunks, query_text: dict, vectors: dict, qrels: dict) -> None:
    """Each query's vector and lexical bm25 candidates as the hybrid search draws them (``POOL``
    per side): [chunk id, distance] and [chunk id, score], best first; with each chunk's document
    and lexemes (as the bm25s baseline reads them), so either leg can be checked query by query."""
    from retrieval.search import store_search

    legs = {}
    for query_id, text in query_text.items():
        sides = {}
        for side, overrides in (("vector", {"mode": "vector"}), ("lexical", LEXICAL_OVERRIDES)):
            hits = store_search(
                store=store,
                query=text,
                overrides={**overrides, "top_k": POOL},
                candidates=POOL,
                query_vector=vectors[query_id],
            ).hits
            sides[side] = [[hit.chunk_id, hit.distance if side == "vector" else hit.lex_score] for hit in hits]
        legs[query_id] = sides
    sources = {str(chunk_id): source for chunk_id, source in chunks.source.items()}
    lexemes = dict(zip(map(str, chunks.ids.tolist()), chunks.lexemes, strict=True))
    path.write_text(
        json.dumps({"legs": legs, "sources": sources, "lexemes": lexemes, "qrels": qrels, "queries": query_text})
    )


def naive_fusion_name(name: str) -> str:
    return name.replace("naive bm25s,", "naive rrf(bm25s, dense),")


def reference_for(config: str, reference: str = REFERENCE_FUSED) -> str:
    """The reference row (the fusion, unless named) an index built with ``config`` is judged against."""
    return reference + (STEMMED if config == STEMMED_CONFIG else "")


def patched(patches: dict[tuple[str, str], object]) -> ExitStack:
    """A context in which each (module, constant) has the given value (a function's value is
    what it returns given the module)."""
    import importlib

    stack = ExitStack()
    for (module, name), value in patches.items():
        imported = importlib.import_module(module)
        stack.enter_context(mock.patch.object(imported, name, value(imported) if callable(value) else value))
    return stack


def rebuilt_name(name: str, config: str) -> str:
    return f"{name}, index_config {config}"


def compare(ours: str, theirs: str, rankings: dict, qrels: dict) -> dict:
    """``ours`` − ``theirs`` in nDCG@10, query by query, with its bootstrap interval."""
    mine, other = per_query_ndcg(rankings[ours], qrels), per_query_ndcg(rankings[theirs], qrels)
    difference = paired_bootstrap(mine, other)
    return {
        "config": ours,
        "against": theirs,
        "ndcg@10_difference": round(difference.mean, 4),
        "ci95": [round(difference.low, 4), round(difference.high, 4)],
        "wins": sum(a > b for a, b in zip(mine, other, strict=True)),
        "losses": sum(a < b for a, b in zip(mine, other, strict=True)),
    }


def rebuild_index(store, config: str) -> dict:
    """The store's lexical index rebuilt with ``config``, timed."""
    from stores.models import Chunk

    seconds = rebuild_lexical_index(store, config)
    chunk_count = Chunk.objects.filter(store=store).count()
    return {
        "config": config,
        "chunks": chunk_count,
        "seconds": round(seconds, 3),
        "chunks_per_second": round(chunk_count / seconds, 1),
    }


if __name__ == "__main__":
    main()
