"""Per-width embedding tables: ``chunk_embeddings_<dims>``.

One table per width is shared by every store of that width, with an HNSW cosine index:
``vector`` up to 2000 dimensions, ``halfvec`` from 2001 to 4000 (pgvector cannot index wider
``vector`` columns). Tables are created on first use, serialised across processes by an
advisory lock, because two workers may ingest the first documents of that width at once.
"""

from __future__ import annotations

from django.db import connection, transaction

MAX_VECTOR_INDEX_DIMS = 2000
MAX_INDEXED_DIMS = 4000
_ADVISORY_LOCK_NAMESPACE = 0x7261676D  # "ragm"


class WidthNotSupported(Exception):
    def __init__(self, dimensions: int):
        super().__init__(
            f"the embedding model returns {dimensions} dimensions; ragmux indexes at most "
            f"{MAX_INDEXED_DIMS} (choose a model, or a dimensions setting, of {MAX_INDEXED_DIMS} or fewer)"
        )
        self.dimensions = dimensions


def table_name(dimensions: int) -> str:
    return f"chunk_embeddings_{int(dimensions)}"


def column_type(dimensions: int) -> str:
    return "vector" if dimensions <= MAX_VECTOR_INDEX_DIMS else "halfvec"


def index_name(dimensions: int) -> str:
    return f"{table_name(dimensions)}_hnsw"


def check_width(dimensions: int) -> None:
    if not 1 <= dimensions <= MAX_INDEXED_DIMS:
        raise WidthNotSupported(dimensions)


def ensure_embedding_table(dimensions: int) -> str:
    """Creates the table for this width (and its indexes) if it does not exist yet."""
    check_width(dimensions)
    name = table_name(dimensions)
    kind = column_type(dimensions)
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        if cursor.fetchone()[0]:
            return name
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_ADVISORY_LOCK_NAMESPACE, dimensions])
        cursor.execute(
            f"""
            CREATE TABLE IF NOT EXISTS {name} (
                chunk_id bigint PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
                store_id bigint NOT NULL REFERENCES rag_stores(id) ON DELETE CASCADE,
                model_key text NOT NULL,
                embedded_hash char(64) NOT NULL,
                embedding {kind}({dimensions}) NOT NULL
            )
            """
        )
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {name}_store ON {name} (store_id)")
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {name}_reuse ON {name} (store_id, model_key, embedded_hash)")
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {index_name(dimensions)} ON {name} USING hnsw (embedding {kind}_cosine_ops)"
        )
    return name


def existing_widths() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename ~ '^chunk_embeddings_[0-9]+$'"
        )
        return sorted(int(row[0].rsplit("_", 1)[1]) for row in cursor.fetchall())


def stores_missing_index_names() -> list[str]:
    """Stores with vectors whose width table has no HNSW index (build failed, dropped, restored)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.name FROM rag_stores s
            WHERE s.dimensions IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM pg_indexes i
                WHERE i.schemaname = current_schema() AND i.indexname = 'chunk_embeddings_' || s.dimensions || '_hnsw'
            )
            ORDER BY s.name
            """
        )
        return [row[0] for row in cursor.fetchall()]
