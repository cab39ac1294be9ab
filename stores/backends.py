"""What this database can run: which lexical backends, which text search configurations.

`pgvector` (PostgreSQL full text) and `bm25` (our own BM25 over per-store term statistics)
need nothing beyond PostgreSQL and pgvector. `pg_search` needs ParadeDB's extension, which is
detected once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from django.db import connection

from stores.choices import SearchBackend

PG_SEARCH_DOCS = "docs/search-backends.md"


@dataclass(frozen=True)
class BackendStatus:
    id: str
    available: bool
    reason: str


@lru_cache(maxsize=1)
def pg_search_status() -> BackendStatus:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_search'")
        row = cursor.fetchone()
    if row is None:
        return BackendStatus(
            SearchBackend.PG_SEARCH,
            False,
            f"the pg_search extension (ParadeDB) is not installed in this database; see {PG_SEARCH_DOCS}",
        )
    return BackendStatus(SearchBackend.PG_SEARCH, True, "")


def backend_statuses() -> list[BackendStatus]:
    return [
        BackendStatus(SearchBackend.PGVECTOR, True, ""),
        BackendStatus(SearchBackend.BM25, True, ""),
        pg_search_status(),
    ]


def backend_available(backend: str) -> BackendStatus:
    return next(status for status in backend_statuses() if status.id == backend)


def text_search_configs() -> list[str]:
    """The text search configurations this server has, for `fts_config` and `index_config`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT cfgname::text FROM pg_ts_config ORDER BY cfgname")
        return [row[0] for row in cursor.fetchall()]


def text_search_config_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s", [name])
        return cursor.fetchone() is not None
