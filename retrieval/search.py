"""The one search function: the dashboard search, context injection and `/v1/retrieve` all
call :func:`store_search` (the last two through `retrieval.retrieve`, from the event loop), so a
query ranks the same way everywhere."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from psycopg.errors import QueryCanceled

from gateway.connections.providers.embeddings import EmbeddingProvider, Embeddings, NoEmbeddings, embedding_provider
from ragmux.core import metrics
from ragmux.core.errors import Conflict, Unavailable, UpstreamFailed
from retrieval import bm25, filtered, pg_search, sql
from retrieval.filters import Filter
from retrieval.ranking import (
    MAX_TYPO_CORRECTIONS,
    SURFACE_FORM_CHUNKS,
    Correction,
    apply_corrections,
    best_correction,
    correction_similarity,
    fuse,
    or_query,
    phrase_and_exclusion_filter,
    positive_text,
    typo_limit,
    within_distance,
)
from stores.choices import RerankBackend, SearchBackend, SearchMode
from stores.index import format_vector
from stores.lexical import lexical_query, lexical_text
from stores.models import RagStore

if TYPE_CHECKING:
    from retrieval.rerank import RerankReport


class SearchTimeout(Unavailable):
    code = "search_timeout"


class StoreCannotEmbed(Conflict):
    """The store's embedding connection can no longer embed a query: it was switched to a provider
    that cannot embed, or its API key no longer opens under this server's encryption key."""

    code = "embedding_unavailable"


@contextmanager
def statement_timeout() -> Iterator[None]:
    """Runs the block's statements in a transaction under SEARCH_TIMEOUT (PostgreSQL's
    statement_timeout), which ends with the transaction, so no other query on the connection
    inherits it; a statement cancelled by it raises :class:`SearchTimeout`."""
    milliseconds = max(1, round(settings.SEARCH_TIMEOUT * 1000))
    nested = connection.in_atomic_block
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)",
                [f"{milliseconds}ms"],
            )
            previous = cursor.fetchone()[0]
            yield
            if nested:
                # Inside a caller's transaction the setting would outlive this block (a savepoint
                # keeps it on release): put the caller's value back.
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [previous])
    except OperationalError as exc:
        if isinstance(exc.__cause__, QueryCanceled):
            raise SearchTimeout(
                f"the search took longer than SEARCH_TIMEOUT ({settings.SEARCH_TIMEOUT:g}s) and was cancelled"
            ) from None
        raise


def query_config(store: RagStore, backend: str) -> str:
    """The text search configuration a query is parsed with under ``backend``."""
    if backend == SearchBackend.BM25:
        return store.query_config
    if backend == SearchBackend.PGVECTOR:
        # fts_config over a `simple` index (the seed's rule), else the index's own configuration,
        # so the query is always stemmed like the chunks.
        return store.fts_config if store.query_config == "simple" else store.query_config
    # pg_search tokenises with its one global index's tokenizer; fts_config is echoed, as the seed does.
    return store.fts_config


def rerank_target(store: RagStore, overrides: dict[str, Any]) -> dict[str, int | None]:
    """The connection or route a search reranks with: a call's override of either replaces the
    store's choice, as a store names one or the other."""
    if "rerank_connection_id" in overrides or "rerank_route_id" in overrides:
        return {
            "rerank_connection_id": overrides.get("rerank_connection_id"),
            "rerank_route_id": overrides.get("rerank_route_id"),
        }
    return {"rerank_connection_id": store.rerank_connection_id, "rerank_route_id": store.rerank_route_id}


@dataclass(frozen=True)
class SearchOptions:
    """A store's search settings with this call's overrides applied."""

    mode: str
    backend: str
    top_k: int
    max_distance: float
    vector_weight: float
    lexical_weight: float
    # How the two lists are fused (stores.choices.FusionRule).
    fusion: str
    typo_tolerance: bool
    # The configuration the query is parsed with (echoed by every search response).
    fts_config: str
    rerank: bool = False
    rerank_backend: str = RerankBackend.LLM
    # The connection a search outside a project's request reranks with (the store's, or this
    # call's override); a project's request with the `llm` backend uses its chat model instead.
    rerank_connection_id: int | None = None
    # Or the rerank route whose targets are tried in order (the store's, or this call's override).
    rerank_route_id: int | None = None
    rerank_candidates: int = 0
    # The call's filter (its key's scope ANDed in), applied on every side before its limit.
    filters: Filter | None = None

    @classmethod
    def for_store(cls, store: RagStore, overrides: dict[str, Any] | None = None) -> SearchOptions:
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        weights = overrides.get("fusion_weights") or store.fusion_weights
        backend = overrides.get("backend", store.search_backend)
        return cls(
            mode=overrides.get("mode", store.search_mode),
            backend=backend,
            top_k=overrides.get("top_k") or store.top_k,
            max_distance=overrides.get("max_distance", store.max_distance),
            vector_weight=float(weights["vector"]),
            lexical_weight=float(weights["lexical"]),
            fusion=overrides.get("fusion", store.fusion),
            typo_tolerance=overrides.get("typo_tolerance", store.typo_tolerance),
            fts_config=query_config(store, backend),
            rerank=overrides.get("rerank", store.rerank),
            rerank_backend=overrides.get("rerank_backend", store.rerank_backend),
            **rerank_target(store, overrides),
            rerank_candidates=store.rerank_candidates,
            filters=overrides.get("filters"),
        )

    def candidates(self) -> int:
        """Candidates per side, so fusion has more than top_k to choose from (the seed's rule)."""
        return max(self.top_k, self.rerank_candidates) if self.rerank else 3 * self.top_k

    def kept(self) -> int:
        """Fused hits kept: top_k, or with reranking on the pool the reranker reorders before the
        cut to top_k."""
        return max(self.top_k, self.rerank_candidates) if self.rerank else self.top_k

    def ranks_by_vector(self) -> bool:
        return self.mode in (SearchMode.VECTOR, SearchMode.HYBRID)

    def embeds_query(self, store: RagStore) -> bool:
        """Whether searching ``store`` embeds the query: to rank by its vector or to cut off by
        distance (a store with nothing ingested has no width to search yet)."""
        return (self.ranks_by_vector() or self.max_distance > 0) and store.dimensions is not None


@dataclass
class Hit:
    chunk_id: int
    document_id: int
    filename: str
    index: int
    section: str
    page: int | None
    content: str
    distance: float | None
    score: float
    vector_rank: int
    fts_rank: int
    source: str
    tags: list[str]
    lex_score: float | None = None
    # The reranker's relevance score, when a reranker ranked the hit.
    rerank_score: float | None = None
    # The query's words (as typed, or as typo-corrected) the chunk holds anywhere in its text.
    matched_terms: list[str] = field(default_factory=list)
    # The document's attributes (stores/attributes.py).
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResult:
    hits: list[Hit]
    mode: str
    backend: str
    fts_config: str
    # With reranking on, `hits` holds the fused pool (SearchOptions.kept) until
    # retrieval.rerank reorders it and cuts it to top_k.
    options: SearchOptions | None = None
    # What became of the rerank; None when reranking is off (or not run yet).
    rerank: RerankReport | None = None
    corrections: list[Correction] = field(default_factory=list)
    embedding_ms: float = 0.0
    database_ms: float = 0.0
    # What embedding the query cost, for the caller to bill: the upstream's count when it
    # reported one (none when the query was not embedded, or the caller passed its vector).
    embedding_tokens: int = 0
    embedding_tokens_reported: bool = True


def _query_embedder(store: RagStore) -> EmbeddingProvider:
    try:
        return embedding_provider(store.embedding_connection)
    except NoEmbeddings as exc:
        raise StoreCannotEmbed(f"the store cannot embed the query: {exc}") from None


def _embedding_failed(exc: UpstreamFailed) -> UpstreamFailed:
    return UpstreamFailed(f"embedding the query failed: {exc}", code="embedding_failed")


@contextmanager
def _query_embedding(store: RagStore) -> Iterator[EmbeddingProvider]:
    """The store's query embedder; the embedding made with it is timed, and its failure said as the
    query's."""
    provider = _query_embedder(store)
    started = time.monotonic()
    try:
        yield provider
    except UpstreamFailed as exc:
        raise _embedding_failed(exc) from None
    finally:
        metrics.observe(
            metrics.QUERY_EMBED_SECONDS,
            time.monotonic() - started,
            provider=store.embedding_connection.provider_type,
        )


def embed_query(store: RagStore, query: str) -> Embeddings:
    with _query_embedding(store) as provider:
        return provider.embed([query])


async def embed_query_async(store: RagStore, query: str) -> Embeddings:
    """:func:`embed_query` from the event loop: a caller that is cancelled ends the upstream call."""
    with _query_embedding(store) as provider:
        return await provider.embed_async([query])


def _vector_side(store: RagStore, query_vector: str, limit: int) -> list[tuple[int, float]]:
    store_chunks, table_rows = sql.chunk_counts(store.pk, store.dimensions)
    # A small store is searched exactly: cheaper than the graph, and never starved of results
    # by the other stores sharing its width table.
    exact = store_chunks <= settings.VECTOR_EXACT_SCAN_MAX_CHUNKS
    # The iterative scan skips other stores' rows; let it read enough of the table to find
    # `limit` of this store's rows even when the store is a small share of it.
    share = store_chunks / max(table_rows, store_chunks, 1)
    max_scan_tuples = max(sql.DEFAULT_MAX_SCAN_TUPLES, math.ceil(4 * limit / max(share, 1e-6)))
    return sql.vector_candidates(
        store_id=store.pk,
        width=store.dimensions,
        query_vector=query_vector,
        limit=limit,
        ef_search=min(sql.HNSW_EF_SEARCH_MAX, max(settings.HNSW_EF_SEARCH_MIN, 4 * limit)),
        exact=exact,
        max_scan_tuples=min(max_scan_tuples, 2**31 - 1),
    )


def _corrections(store: RagStore, query: str) -> list[Correction]:
    """Corrections of the typed words whose lexeme the store's vocabulary lacks; each names the
    word as typed, so that it can be replaced in the query."""
    config = store.query_config
    typed = dict.fromkeys(word.lower() for word in lexical_text(positive_text(query)).split())
    words = sql.word_lexemes(list(typed), config)
    unknown = set(sql.unknown_terms(store.pk, [lexeme for _, lexeme in words]))
    correctable = [(word, lexeme) for word, lexeme in words if lexeme in unknown and typo_limit(word, lexeme)]
    correctable = correctable[:MAX_TYPO_CORRECTIONS]
    # Two misspellings may share a lexeme: it is looked up once, with the looser threshold.
    thresholds: dict[str, float] = {}
    for word, lexeme in correctable:
        threshold = correction_similarity(lexeme, typo_limit(word, lexeme))
        thresholds[lexeme] = min(threshold, thresholds.get(lexeme, threshold))
    similar = sql.similar_terms(store.pk, thresholds, config)
    found = []
    for word, lexeme in correctable:
        correction = best_correction(word, lexeme, similar[lexeme])
        if correction is not None:
            found.append(correction)
    if not found:
        return found
    # Chosen by the terms alone: the words only name them for a person, after the choice.
    words = sql.surface_forms(
        store.pk, [correction.corrected for correction in found], config, chunks=SURFACE_FORM_CHUNKS
    )
    return [replace(c, corrected_word=words.get(c.corrected, c.corrected)) for c in found]


def bm25_candidates(
    store: RagStore, query: str, limit: int, scope: filtered.StoreFilter | None = None
) -> list[tuple[int, float]]:
    """The bm25 backend's lexical side for a query: its positive words score, its phrases and
    exclusions filter, both split at punctuation like the index; with ``scope``, only the chunks
    passing the search's filter."""
    filter_query = phrase_and_exclusion_filter(query)
    scoring = {
        "scoring_text": lexical_text(positive_text(query)),
        "filter_query": lexical_query(filter_query) if filter_query else None,
    }

    def unfiltered(size: int) -> list[tuple[int, float]]:
        return bm25.bm25_candidates(store_id=store.pk, config=store.query_config, limit=size, **scoring)

    if scope is None:
        return unfiltered(limit)
    return filtered.bm25_candidates(store, scope, limit, unfiltered, **scoring)


def _lexical_side(
    store: RagStore, query: str, options: SearchOptions, limit: int, scope: filtered.StoreFilter | None
) -> tuple[str, list[tuple[int, float]]]:
    """The lexical candidates and the backend that actually produced them."""
    passing = None if scope is None else scope.condition
    if options.backend == SearchBackend.PG_SEARCH:
        answered = pg_search.candidates(store=store, query=query, limit=limit, passing=passing)
        if answered is not None:
            return SearchBackend.PG_SEARCH, answered
        options = replace(
            options, backend=SearchBackend.PGVECTOR, fts_config=query_config(store, SearchBackend.PGVECTOR)
        )
    if options.backend == SearchBackend.BM25:
        return SearchBackend.BM25, bm25_candidates(store, query, limit, scope)
    return SearchBackend.PGVECTOR, sql.fulltext_candidates(
        store_id=store.pk,
        config=options.fts_config,
        query=lexical_query(or_query(query)),
        limit=limit,
        passing=passing,
    )


def store_search(
    *,
    store: RagStore,
    query: str,
    overrides: dict[str, Any] | None = None,
    options: SearchOptions | None = None,
    candidates: int | None = None,
    query_vector: list[float] | None = None,
    query_embedding_ms: float = 0.0,
) -> SearchResult:
    """Searches one store; the result says what embedding the query cost. ``options`` are the
    store's settings with ``overrides`` applied, unless the caller made them already
    (`retrieval.retrieve`); ``candidates`` overrides the per-side candidate count (any size);
    ``query_vector`` skips embedding the query (a bench that embedded its queries beforehand, or a
    caller that embedded it in ``query_embedding_ms``).

    Raises :class:`StoreCannotEmbed` when the query needs a vector the store's connection can no
    longer make, ``UpstreamFailed`` when the provider fails, :class:`SearchTimeout`."""
    options = options or SearchOptions.for_store(store, overrides)
    limit = candidates or options.candidates()
    if store.dimensions is None:
        # Recorded by the first ingest, possibly after the caller loaded the store.
        store.dimensions = RagStore.objects.values_list("dimensions", flat=True).get(pk=store.pk)
    wants_vector = options.ranks_by_vector()
    result = SearchResult(
        hits=[], mode=options.mode, backend=options.backend, fts_config=options.fts_config, options=options
    )

    vector_text = None
    if options.embeds_query(store):
        started = time.monotonic()
        if query_vector is None:
            embedded = embed_query(store, query)
            query_vector = embedded.vectors[0]
            result.embedding_tokens, result.embedding_tokens_reported = embedded.tokens, embedded.tokens_reported
        vector_text = format_vector(query_vector)
        result.embedding_ms = query_embedding_ms + (time.monotonic() - started) * 1000

    started = time.monotonic()
    with statement_timeout():
        vector_rows: list[tuple[int, float]] = []
        lexical_rows: list[tuple[int, float]] = []
        scope = None if options.filters is None else filtered.StoreFilter.of(store, options.filters)
        if wants_vector and vector_text is not None:
            vector_rows = (
                _vector_side(store, vector_text, limit)
                if scope is None
                else filtered.vector_candidates(
                    store, scope, limit, lambda size: _vector_side(store, vector_text, size), vector_text
                )
            )
        if options.mode in (SearchMode.HYBRID, SearchMode.LEXICAL):
            corrected = query
            if options.typo_tolerance:
                result.corrections = _corrections(store, query)
                corrected = apply_corrections(query, result.corrections)
            result.backend, lexical_rows = _lexical_side(store, corrected, options, limit, scope)
        else:
            unavailable = options.backend == SearchBackend.PG_SEARCH and not pg_search.available()
            result.backend = SearchBackend.PGVECTOR if unavailable else options.backend
        result.fts_config = query_config(store, result.backend)

        fused = fuse(
            vector_rows,
            lexical_rows,
            vector_weight=options.vector_weight,
            lexical_weight=options.lexical_weight,
            rule=options.fusion,
        )
        distance_of: dict[int, float | None] = dict(vector_rows)
        if vector_text is not None:
            missing = [f.chunk_id for f in fused if f.chunk_id not in distance_of]
            distance_of.update(sql.distances(width=store.dimensions, query_vector=vector_text, chunk_ids=missing))
        kept = within_distance(fused, distance_of, options.max_distance)[: options.kept()]
        details = sql.hit_details([f.chunk_id for f in kept])
        matched = sql.matched_words(
            chunk_ids=list(details), words=query_words(query, result.corrections), config=result.fts_config
        )
    lexical_score = dict(lexical_rows) if result.backend in (SearchBackend.BM25, SearchBackend.PG_SEARCH) else {}
    for item in kept:
        if item.chunk_id not in details:  # deleted between the two statements
            continue
        document_id, filename, index, section, page, content, source, tags, attributes = details[item.chunk_id]
        result.hits.append(
            Hit(
                chunk_id=item.chunk_id,
                document_id=document_id,
                filename=filename,
                index=index,
                section=section,
                page=page,
                content=content,
                distance=distance_of.get(item.chunk_id),
                score=item.score,
                vector_rank=item.vector_rank,
                fts_rank=item.fts_rank,
                source=source,
                tags=list(tags),
                lex_score=lexical_score.get(item.chunk_id),
                matched_terms=matched.get(item.chunk_id, []),
                attributes=json.loads(attributes),
            )
        )
    result.database_ms = (time.monotonic() - started) * 1000
    metrics.observe(metrics.SEARCH_SECONDS, result.database_ms / 1000, mode=result.mode, backend=result.backend)
    metrics.observe(
        metrics.RETRIEVAL_SECONDS,
        (result.embedding_ms + result.database_ms) / 1000,
        mode=result.mode,
        backend=result.backend,
    )
    return result


def query_words(query: str, corrections: list[Correction]) -> list[str]:
    """The words a query scores with, lowercased, once each: its positive words as typed, then the
    typo corrections that replaced some of them, as the word the documents use ("liability"): the
    stem the query runs with ("liabil") has the same lexeme, but a person reads the word."""
    typed = lexical_text(positive_text(query)).lower().split()
    return list(
        dict.fromkeys([*typed, *(correction.corrected_word or correction.corrected for correction in corrections)])
    )


def matching_words(*, query: str, result: SearchResult) -> list[str]:
    """The words of ``result``'s hits (lowercased) that the query matched: those whose lexeme,
    under the configuration that parsed the query, is a lexeme of one of its scoring words or
    typo corrections. Under `english` a query for "pools" marks "pool" and "Pools", and no stop
    word. Longest first, so a pattern built from them prefers the longer of two overlapping words;
    single letters are left out."""
    config = result.fts_config
    wanted = {lexeme for _, lexeme in sql.word_lexemes(query_words(query, result.corrections), config)}
    if not wanted:
        return []
    seen = dict.fromkeys(word.lower() for hit in result.hits for word in lexical_text(hit.content).split())
    found = [word for word, lexeme in sql.word_lexemes([w for w in seen if len(w) > 1], config) if lexeme in wanted]
    return sorted(found, key=lambda word: (-len(word), word))
