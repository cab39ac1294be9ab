"""The one writer of a store's search index: chunks, their vectors, BM25 postings and the
per-store term statistics, kept in step.

Ingestion, document deletion, the lexical rebuild and the benchmarks write through these
functions only. Every transaction that writes a store's index takes its locks in one order, so
no two of them deadlock:

1. the store's index lock, before anything else: writers share it
   (:func:`lock_store_for_writing`), a lexical rebuild holds it alone
   (:func:`lock_store_for_rebuild`);
2. the document's row, when a document is written or deleted (ingestion's claim holds it);
3. the store's statistics row, taken by the functions that change document frequencies and
   totals just before they do.

So writers into one store insert chunks, postings and vectors (the HNSW insertion, most of a
document's cost) side by side, and queue only for the counts, which stay exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection

from stores.lexical import lexical_text
from stores.vector_tables import column_type, table_name

# The advisory lock namespace ("rmxi") of stores' index locks; the second key is the store's id.
_INDEX_LOCK_NAMESPACE = 0x726D7869
_INDEX_LOCK_SQL = "SELECT {function}(%s, (%s %% 2147483647)::int)"
# The configuration the store's live lexical index is built with (see RagStore.query_config).
_INDEXED_CONFIG_SQL = "(SELECT coalesce(nullif(indexed_config, ''), 'simple')::regconfig FROM rag_stores WHERE id = %s)"
# A chunk's tsvector from its punctuation-split text, and its BM25 length: the lexeme positions
# in that tsvector, so lengths and term frequencies always agree.
_TSV_SQL = "to_tsvector({config}, {text})"
_TOKEN_COUNT_SQL = "(SELECT coalesce(sum(array_length(t.positions, 1)), 0) FROM unnest({tsv}) t)"
# The BM25 postings of freshly written chunk rows (a CTE returning id, store_id, tsv and
# token_count): one per distinct lexeme, taken from the rows written rather than read back.
_POSTINGS_SQL = """
    INSERT INTO chunk_terms (chunk_id, store_id, term, tf, chunk_length)
    SELECT r.id, r.store_id, t.lexeme, array_length(t.positions, 1), r.token_count
    FROM {rows} r, unnest(r.tsv) t
"""


@dataclass(frozen=True)
class ChunkRow:
    document_id: int
    index: int
    content: str
    section: str
    page: int | None
    embedded_hash: str


def format_vector(vector: Sequence[float]) -> str:
    """pgvector's text form; the database parses it straight into vector or halfvec."""
    return "[" + ",".join(map(repr, map(float, vector))) + "]"


def lock_store_for_writing(store_id: int) -> None:
    """The first lock of a transaction that writes a store's chunks, shared with other writers.
    A rebuild in progress holds it alone: the writer waits for the rebuild's commit, and reads the
    indexed configuration only afterwards (each statement sees the latest commit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _INDEX_LOCK_SQL.format(function="pg_advisory_xact_lock_shared"), [_INDEX_LOCK_NAMESPACE, store_id]
        )


def lock_store_for_rebuild(store_id: int) -> None:
    """The store's index lock alone, until the transaction ends: waits for the writers in flight,
    and keeps new ones out while every chunk is retokenised."""
    with connection.cursor() as cursor:
        cursor.execute(_INDEX_LOCK_SQL.format(function="pg_advisory_xact_lock"), [_INDEX_LOCK_NAMESPACE, store_id])


def _lock_store_stats(store_id: int) -> None:
    """Writers of one store change its document frequencies and totals one after another."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO store_text_stats (store_id, chunk_count, token_total) VALUES (%s, 0, 0) "
            "ON CONFLICT (store_id) DO NOTHING",
            [store_id],
        )
        cursor.execute("SELECT 1 FROM store_text_stats WHERE store_id = %s FOR UPDATE", [store_id])


def write_chunks(*, store_id: int, rows: Sequence[ChunkRow]) -> list[int]:
    """Inserts chunks with their tsvectors (the store's indexed configuration, read after the
    caller took :func:`lock_store_for_writing`, so a rebuild that just finished is followed), BM25
    lengths and postings; returns their ids in the order of ``rows``."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH written AS (
                INSERT INTO chunks
                    (store_id, document_id, index, content, section, page, embedded_hash, tsv, token_count)
                SELECT %s, x.document_id, x.idx, x.content, x.section, x.page, x.digest, v.tsv,
                       {_TOKEN_COUNT_SQL.format(tsv="v.tsv")}
                FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::text[], %s::int[], %s::text[], %s::text[])
                     AS x(document_id, idx, content, section, page, digest, lexical)
                CROSS JOIN LATERAL (SELECT {_TSV_SQL.format(config=_INDEXED_CONFIG_SQL, text="x.lexical")} AS tsv) v
                RETURNING id, document_id, index, store_id, tsv, token_count
            ), postings AS ({_POSTINGS_SQL.format(rows="written")})
            SELECT id, document_id, index FROM written
            """,
            [
                store_id,
                [r.document_id for r in rows],
                [r.index for r in rows],
                [r.content for r in rows],
                [r.section for r in rows],
                [r.page for r in rows],
                [r.embedded_hash for r in rows],
                [lexical_text(r.content) for r in rows],
                store_id,
            ],
        )
        ids = {(document_id, index): chunk_id for chunk_id, document_id, index in cursor.fetchall()}
    return [ids[(r.document_id, r.index)] for r in rows]


def write_vectors(
    *, store_id: int, dimensions: int, model_key: str, chunk_ids: Sequence[int], rows: Sequence[ChunkRow], vectors
) -> None:
    """Stores one vector per chunk (pgvector text form, see :func:`format_vector`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table_name(dimensions)} (chunk_id, store_id, model_key, embedded_hash, embedding)
            SELECT x.chunk_id, %s, %s, x.digest, x.embedding::{column_type(dimensions)}({dimensions})
            FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS x(chunk_id, digest, embedding)
            """,
            [store_id, model_key, list(chunk_ids), [r.embedded_hash for r in rows], list(vectors)],
        )


def add_to_statistics(*, store_id: int, chunk_ids: Sequence[int]) -> None:
    """Counts chunks whose postings are written into the store's document frequencies and totals."""
    _lock_store_stats(store_id)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO store_terms (store_id, term, df)
            SELECT %s, term, count(*) FROM chunk_terms WHERE chunk_id = ANY(%s)
            GROUP BY term ORDER BY term
            ON CONFLICT (store_id, term) DO UPDATE SET df = store_terms.df + EXCLUDED.df
            """,
            [store_id, list(chunk_ids)],
        )
        cursor.execute(
            """
            UPDATE store_text_stats s SET chunk_count = s.chunk_count + d.chunks, token_total = s.token_total + d.tokens
            FROM (SELECT count(*) AS chunks, coalesce(sum(token_count), 0) AS tokens FROM chunks WHERE id = ANY(%s)) d
            WHERE s.store_id = %s
            """,
            [list(chunk_ids), store_id],
        )


@dataclass(frozen=True)
class _Counted:
    """What deleted chunks counted for in their store's statistics, until it is subtracted."""

    terms: list[str]
    document_frequencies: list[int]
    chunks: int
    tokens: int


def _take_out_chunks(document_id: int) -> _Counted | None:
    """Deletes a document's chunks (their vectors and postings go with them, ON DELETE CASCADE)
    and returns what they counted for: the statistics lock is taken later, for the subtraction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM chunks WHERE document_id = %s", [document_id])
        chunk_ids = [row[0] for row in cursor.fetchall()]
        if not chunk_ids:
            return None
        cursor.execute(
            "SELECT term, count(*) FROM chunk_terms WHERE chunk_id = ANY(%s) GROUP BY term ORDER BY term", [chunk_ids]
        )
        terms = cursor.fetchall()
        cursor.execute("DELETE FROM chunks WHERE id = ANY(%s) RETURNING token_count", [chunk_ids])
        token_counts = [row[0] for row in cursor.fetchall()]
    return _Counted(
        terms=[term for term, _ in terms],
        document_frequencies=[df for _, df in terms],
        chunks=len(token_counts),
        tokens=sum(token_counts),
    )


def _subtract_from_statistics(*, store_id: int, counted: _Counted) -> None:
    _lock_store_stats(store_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE store_text_stats SET chunk_count = chunk_count - %s, token_total = token_total - %s "
            "WHERE store_id = %s",
            [counted.chunks, counted.tokens, store_id],
        )
        cursor.execute(
            """
            UPDATE store_terms s SET df = s.df - gone.df
            FROM unnest(%s::text[], %s::bigint[]) AS gone(term, df)
            WHERE s.store_id = %s AND s.term = gone.term
            """,
            [counted.terms, counted.document_frequencies, store_id],
        )
        cursor.execute(
            "DELETE FROM store_terms WHERE store_id = %s AND term = ANY(%s) AND df <= 0", [store_id, counted.terms]
        )


def remove_document(*, store_id: int, document_id: int) -> None:
    """Takes a document's chunks, vectors and postings out of the index and their counts out of
    the statistics. The caller holds :func:`lock_store_for_writing`, then the document's row."""
    counted = _take_out_chunks(document_id)
    if counted is not None:
        _subtract_from_statistics(store_id=store_id, counted=counted)


def replace_document(
    *, store_id: int, dimensions: int, model_key: str, document_id: int, rows: Sequence[ChunkRow], vectors
) -> None:
    """Replaces a document's chunks, vectors and postings, then its counts in the statistics.
    The caller holds :func:`lock_store_for_writing`, then the document's row (ingestion: its claim)."""
    counted = _take_out_chunks(document_id)
    chunk_ids = write_chunks(store_id=store_id, rows=rows)
    write_vectors(
        store_id=store_id, dimensions=dimensions, model_key=model_key, chunk_ids=chunk_ids, rows=rows, vectors=vectors
    )
    if counted is not None:
        _subtract_from_statistics(store_id=store_id, counted=counted)
    add_to_statistics(store_id=store_id, chunk_ids=chunk_ids)


# --------------------------------------------------------------------------------------------
# Rebuilding the lexical index with another configuration (stores/rebuild.py drives it)
# --------------------------------------------------------------------------------------------


def store_chunk_ids(store_id: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM chunks WHERE store_id = %s ORDER BY id", [store_id])
        return [row[0] for row in cursor.fetchall()]


def retokenise_chunks(*, config: str, chunk_ids: Sequence[int]) -> None:
    """Rewrites the tsvectors and BM25 lengths of chunks with ``config`` and replaces their
    postings. Contents, vectors and chunk ids are untouched; the store's statistics are recounted
    afterwards by :func:`recount_statistics`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, content FROM chunks WHERE id = ANY(%s)", [list(chunk_ids)])
        ids, contents = zip(*cursor.fetchall(), strict=True) if chunk_ids else ((), ())
        cursor.execute("DELETE FROM chunk_terms WHERE chunk_id = ANY(%s)", [list(ids)])
        cursor.execute(
            f"""
            WITH rewritten AS (
                UPDATE chunks c SET tsv = v.tsv, token_count = {_TOKEN_COUNT_SQL.format(tsv="v.tsv")}
                FROM unnest(%s::bigint[], %s::text[]) AS x(id, lexical)
                CROSS JOIN LATERAL (SELECT {_TSV_SQL.format(config="%s::regconfig", text="x.lexical")} AS tsv) v
                WHERE c.id = x.id
                RETURNING c.id, c.store_id, c.tsv, c.token_count
            )
            {_POSTINGS_SQL.format(rows="rewritten")}
            """,
            [list(ids), [lexical_text(content) for content in contents], config],
        )


def recount_statistics(*, store_id: int) -> None:
    """The store's document frequencies and totals counted afresh from its postings and chunks,
    exactly as building the store from scratch leaves them. The caller holds
    :func:`lock_store_for_rebuild`."""
    _lock_store_stats(store_id)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM store_terms WHERE store_id = %s", [store_id])
        cursor.execute(
            "INSERT INTO store_terms (store_id, term, df) "
            "SELECT %s, term, count(*) FROM chunk_terms WHERE store_id = %s GROUP BY term ORDER BY term",
            [store_id, store_id],
        )
        cursor.execute(
            """
            UPDATE store_text_stats s SET chunk_count = d.chunks, token_total = d.tokens
            FROM (SELECT count(*) AS chunks, coalesce(sum(token_count), 0) AS tokens FROM chunks WHERE store_id = %s) d
            WHERE s.store_id = %s
            """,
            [store_id, store_id],
        )


def switch_indexed_config(*, store_id: int, config: str) -> None:
    """Records the configuration the store's rebuilt index now uses: queries follow it from the
    moment the rebuild's transaction commits."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE rag_stores SET indexed_config = %s WHERE id = %s", [config, store_id])
