"""The `pg_search` (ParadeDB BM25) lexical backend.

UNTESTED HERE: the extension cannot be installed on the machines this project is built and
tested on, so only detection, the refusal to save and the read-time fallback are exercised
by the test suite. Everything that talks to the extension itself sits behind this module's
two functions — :func:`available` and :func:`candidates` — and is written from ParadeDB's
documented API:

- one global index ``idx_chunks_bm25`` on ``chunks(id, content, store_id, document_id)`` with
  ``key_field = 'id'``, created lazily on the first search of a pg_search store, serialised
  across processes by a transaction-scoped advisory lock (searches wait at most 15 s for a
  build in progress, then fall back);
- a dropped index is noticed by the failing query: that search falls back to `pgvector`,
  the "index exists" flag is cleared, and the next search rebuilds it;
- ``PG_SEARCH_TOKENIZER`` (default ``default``) picks the analyser; a mismatch with the one
  the existing index carries is logged, not silently ignored.

When the backend cannot answer, :func:`candidates` returns None and the caller answers from
`pgvector` (full text): retrieval degrades, it never fails, and the response names the
backend that ran. The fallback is logged once per store per process.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from retrieval.sql import DocumentCondition
from stores.backends import pg_search_status

logger = logging.getLogger("ragmux.retrieval.pg_search")

INDEX_NAME = "idx_chunks_bm25"
BUILD_LOCK = 0x70675F73  # "pg_s"
BUILD_WAIT_SECONDS = 15

_index_ready = False
_warned_stores: set[int] = set()


def available() -> bool:
    return pg_search_status().available


def _fall_back(store_id: int, reason: str) -> None:
    if store_id not in _warned_stores:
        _warned_stores.add(store_id)
        logger.warning("store %s asks for pg_search but %s; answering from pgvector", store_id, reason)


def _ensure_index() -> bool:
    """Builds the global BM25 index once; False when it cannot be built right now."""
    global _index_ready
    if _index_ready:
        return True
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{BUILD_WAIT_SECONDS}s'")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [BUILD_LOCK])
            cursor.execute(
                f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON chunks USING bm25 (id, content, store_id, document_id) "
                f'WITH (key_field = \'id\', text_fields = \'{{"content": {{"tokenizer": '
                f'{{"type": "{settings.PG_SEARCH_TOKENIZER}"}}}}}}\')'
            )
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [INDEX_NAME])
            definition = cursor.fetchone()[0]
    except DatabaseError as exc:
        logger.warning("the pg_search index could not be built: %s", exc)
        return False
    if f'"{settings.PG_SEARCH_TOKENIZER}"' not in definition:
        # CREATE INDEX IF NOT EXISTS kept an index built with another analyser.
        logger.warning(
            "%s was built with another tokenizer than PG_SEARCH_TOKENIZER=%s (%s); drop it to rebuild",
            INDEX_NAME,
            settings.PG_SEARCH_TOKENIZER,
            definition,
        )
    _index_ready = True
    return True


def candidates(
    *, store, query: str, limit: int, passing: DocumentCondition | None = None
) -> list[tuple[int, float]] | None:
    """(chunk_id, BM25 score) from ParadeDB, or None when pg_search cannot answer. With
    ``passing`` (a search's filter), only chunks of the documents meeting it, before the limit."""
    global _index_ready
    if not available():
        _fall_back(store.pk, "the pg_search extension is not available")
        return None
    if not _ensure_index():
        _fall_back(store.pk, "its index could not be built")
        return None
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            within, within_params = (
                ("", [])
                if passing is None
                else (f"AND document_id IN ({passing.documents()}) ", passing.all_params(store.pk))
            )
            cursor.execute(
                f"SELECT id, paradedb.score(id) FROM chunks WHERE content @@@ %s AND store_id = %s {within}"
                "ORDER BY paradedb.score(id) DESC, id LIMIT %s",
                [query, store.pk, *within_params, limit],
            )
            return cursor.fetchall()
    except DatabaseError as exc:
        # Dropped under us, or broken: this search degrades, the next one rebuilds.
        _index_ready = False
        _fall_back(store.pk, f"its query failed ({exc.__class__.__name__})")
        return None
