"""Per-store term statistics for BM25 and typo correction, kept in step with the chunks.

Every change runs inside the caller's transaction after the store's statistics row has been
locked (:func:`lock_store_stats`), so concurrent writers to one store update document
frequencies one after another and never deadlock.
"""

from __future__ import annotations

from django.db import connection


def lock_store_stats(store_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO store_text_stats (store_id, chunk_count, token_total) VALUES (%s, 0, 0) "
            "ON CONFLICT (store_id) DO NOTHING",
            [store_id],
        )
        cursor.execute("SELECT 1 FROM store_text_stats WHERE store_id = %s FOR UPDATE", [store_id])


def add_document_terms(*, store_id: int, document_id: int) -> None:
    """Indexes the terms of a document's freshly written chunks."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO chunk_terms (chunk_id, store_id, term, tf, chunk_length)
            SELECT c.id, c.store_id, t.lexeme, array_length(t.positions, 1), c.token_count
            FROM chunks c, unnest(c.tsv) t
            WHERE c.document_id = %s
            """,
            [document_id],
        )
        cursor.execute(
            """
            INSERT INTO store_terms (store_id, term, df)
            SELECT %s, ct.term, count(*)
            FROM chunk_terms ct JOIN chunks c ON c.id = ct.chunk_id
            WHERE c.document_id = %s
            GROUP BY ct.term ORDER BY ct.term
            ON CONFLICT (store_id, term) DO UPDATE SET df = store_terms.df + EXCLUDED.df
            """,
            [store_id, document_id],
        )
        _shift_totals(cursor, store_id, document_id, sign=1)


def remove_document_terms(*, store_id: int, document_id: int) -> None:
    """Takes a document's chunks out of the statistics (before the chunks are deleted)."""
    with connection.cursor() as cursor:
        _shift_totals(cursor, store_id, document_id, sign=-1)
        cursor.execute(
            """
            UPDATE store_terms s SET df = s.df - gone.n
            FROM (
                SELECT ct.term, count(*) AS n
                FROM chunk_terms ct JOIN chunks c ON c.id = ct.chunk_id
                WHERE c.document_id = %s
                GROUP BY ct.term
            ) gone
            WHERE s.store_id = %s AND s.term = gone.term
            """,
            [document_id, store_id],
        )
        cursor.execute("DELETE FROM store_terms WHERE store_id = %s AND df <= 0", [store_id])


# The BM25 length of a chunk: lexeme positions in its `simple` tsvector, computed by the same
# function that fills chunks.tsv so lengths and term frequencies always agree.
TOKEN_COUNT_SQL = (
    "(SELECT coalesce(sum(array_length(t.positions, 1)), 0) FROM unnest(to_tsvector('simple', {content})) t)"
)


def _shift_totals(cursor, store_id: int, document_id: int, *, sign: int) -> None:
    cursor.execute(
        """
        UPDATE store_text_stats s
        SET chunk_count = s.chunk_count + %s * d.chunks, token_total = s.token_total + %s * d.tokens
        FROM (SELECT count(*) AS chunks, coalesce(sum(token_count), 0) AS tokens
              FROM chunks WHERE document_id = %s) d
        WHERE s.store_id = %s
        """,
        [sign, sign, document_id, store_id],
    )
