"""The raw SQL of retrieval: vector candidates (HNSW or exact), full-text and BM25 candidates,
distances, hit details and vocabulary look-ups. Every function runs one statement on the
current connection and returns plain tuples."""

from __future__ import annotations

from django.db import connection

from stores.vector_tables import column_type, table_name

BM25_K1 = 1.2
BM25_B = 0.75
DEFAULT_MAX_SCAN_TUPLES = 20000


def _vector_literal(width: int) -> str:
    return f"%s::{column_type(width)}({width})"


def table_rows_estimate(width: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass(%s)", [table_name(width)]
        )
        row = cursor.fetchone()
    return row[0] if row else 0


def store_chunk_count(store_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT chunk_count FROM store_text_stats WHERE store_id = %s", [store_id])
        row = cursor.fetchone()
    return row[0] if row else 0


def vector_candidates(
    *, store_id: int, width: int, query_vector: str, limit: int, ef_search: int, exact: bool, max_scan_tuples: int
) -> list[tuple[int, float]]:
    """(chunk_id, cosine distance), nearest first, ties by chunk id."""
    table = table_name(width)
    literal = _vector_literal(width)
    with connection.cursor() as cursor:
        if exact:
            # `+ 0` hides the ordering from the HNSW index: the store's rows are read through its
            # store_id index and sorted exactly.
            cursor.execute(
                f"SELECT chunk_id, (embedding <=> {literal}) + 0 AS distance FROM {table} "
                "WHERE store_id = %s ORDER BY distance, chunk_id LIMIT %s",
                [query_vector, store_id, limit],
            )
            return cursor.fetchall()
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, false), set_config('hnsw.iterative_scan', 'relaxed_order', false),"
            " set_config('hnsw.max_scan_tuples', %s, false)",
            [str(ef_search), str(max_scan_tuples)],
        )
        # Iterative scans return nearly ordered rows; the outer sort makes the order exact.
        cursor.execute(
            f"""
            WITH nearest AS MATERIALIZED (
                SELECT chunk_id, embedding <=> {literal} AS distance FROM {table}
                WHERE store_id = %s ORDER BY embedding <=> {literal} LIMIT %s
            )
            SELECT chunk_id, distance FROM nearest ORDER BY distance, chunk_id
            """,
            [query_vector, store_id, query_vector, limit],
        )
        return cursor.fetchall()


def distances(*, width: int, query_vector: str, chunk_ids: list[int]) -> dict[int, float]:
    if not chunk_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT chunk_id, embedding <=> {_vector_literal(width)} FROM {table_name(width)} "
            "WHERE chunk_id = ANY(%s)",
            [query_vector, chunk_ids],
        )
        return dict(cursor.fetchall())


def fulltext_candidates(*, store_id: int, config: str, query: str, limit: int) -> list[tuple[int, float]]:
    """PostgreSQL full text (`ts_rank_cd`) over the `simple` index; ``config`` parses the query."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.id, ts_rank_cd(c.tsv, q) AS rank
            FROM websearch_to_tsquery(%s::regconfig, %s) q, chunks c
            WHERE numnode(q) > 0 AND c.store_id = %s AND c.tsv @@ q
            ORDER BY rank DESC, c.id LIMIT %s
            """,
            [config, query, store_id, limit],
        )
        return cursor.fetchall()


def bm25_candidates(
    *, store_id: int, scoring_text: str, filter_query: str | None, limit: int
) -> list[tuple[int, float]]:
    """BM25 in Lucene's form — Σ idf · tf / (tf + k1 · (1 − b + b · length / average length)) with
    idf = ln(1 + (N − df + 0.5) / (df + 0.5)), k1 1.2, b 0.75 — over the store's term statistics,
    the query tokenised by the same `simple` configuration as the chunks.

    ``filter_query`` (websearch syntax) restricts the result to chunks matching its phrases and
    exclusions; scoring uses the positive terms of ``scoring_text`` only.
    """
    phrase_filter = (
        "JOIN chunks c ON c.id = scored.chunk_id AND c.tsv @@ websearch_to_tsquery('simple', %(filter)s)"
        if filter_query
        else ""
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH terms AS (
                SELECT DISTINCT lexeme AS term FROM unnest(to_tsvector('simple', %(text)s))
            ), stats AS (
                SELECT chunk_count::float8 AS n, greatest(token_total::float8 / greatest(chunk_count, 1), 1e-9) AS avgdl
                FROM store_text_stats WHERE store_id = %(store)s
            ), weights AS (
                SELECT st.term, ln(1 + (stats.n - st.df + 0.5) / (st.df + 0.5)) AS idf
                FROM store_terms st, stats
                WHERE st.store_id = %(store)s AND st.term IN (SELECT term FROM terms)
            ), scored AS (
                SELECT ct.chunk_id,
                       sum(w.idf * ct.tf
                           / (ct.tf + %(k1)s * (1 - %(b)s + %(b)s * ct.chunk_length / stats.avgdl))) AS score
                FROM weights w
                JOIN chunk_terms ct ON ct.store_id = %(store)s AND ct.term = w.term
                CROSS JOIN stats
                GROUP BY ct.chunk_id
            )
            SELECT scored.chunk_id, scored.score FROM scored {phrase_filter}
            ORDER BY scored.score DESC, scored.chunk_id LIMIT %(limit)s
            """,
            {
                "text": scoring_text,
                "store": store_id,
                "k1": BM25_K1,
                "b": BM25_B,
                "filter": filter_query,
                "limit": limit,
            },
        )
        return cursor.fetchall()


def hit_details(chunk_ids: list[int]) -> dict[int, tuple]:
    """chunk id → (document_id, filename, index, section, page, content, source, tags)."""
    if not chunk_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.id, c.document_id, d.filename, c.index, c.section, c.page, c.content, d.source, d.tags
            FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(%s)
            """,
            [chunk_ids],
        )
        return {row[0]: row[1:] for row in cursor.fetchall()}


def query_lexemes(text: str) -> list[str]:
    """The `simple` lexemes of a query, in order of first appearance."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT lexeme FROM unnest(to_tsvector('simple', %s)) ORDER BY positions[1]", [text])
        return [row[0] for row in cursor.fetchall()]


def unknown_terms(store_id: int, terms: list[str]) -> list[str]:
    """The terms absent from the store's vocabulary, in the order given."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.term FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, position) WHERE NOT EXISTS "
            "(SELECT 1 FROM store_terms s WHERE s.store_id = %s AND s.term = t.term) ORDER BY t.position",
            [terms, store_id],
        )
        return [row[0] for row in cursor.fetchall()]


def similar_terms(store_id: int, word: str, limit: int = 50) -> list[tuple[str, int]]:
    """Vocabulary terms sharing trigrams with ``word`` (candidates for an edit-distance check)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('pg_trgm.similarity_threshold', '0.2', false)")
        cursor.execute(
            "SELECT term, df FROM store_terms WHERE store_id = %s AND term %% %s "
            "ORDER BY similarity(term, %s) DESC, df DESC LIMIT %s",
            [store_id, word, word, limit],
        )
        return cursor.fetchall()
