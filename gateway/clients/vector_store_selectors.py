"""Reads of files, vector stores and their files: what a project may reach, and the file each
searched document came from."""

from __future__ import annotations

from gateway.clients.models import Project, VectorStore, VectorStoreFile
from gateway.clients.selectors import row_instances, table_columns
from gateway.clients.vector_store_ids import VECTOR_STORE_PREFIX, document_file_id, is_id
from gateway.connections.models import ModelConnection
from ragmux.core import asyncdb
from ragmux.core.errors import NotFound
from stores.models import Document, RagStore


def vector_store_not_found(vector_store_id: str) -> NotFound:
    """The one refusal of a vector store the project cannot reach: another project's reads as
    none at all."""
    return NotFound(f"no vector store with id {str(vector_store_id)[:80]!r}")


# A vector store the project reaches: its own, or the row of the store an admin gave it while
# that store is still the project's.
REACHABLE = "vs.project_id = %s AND (vs.owned OR vs.store_id IS NOT DISTINCT FROM %s)"
_STORE_ROWS = ((RagStore, "s"), (ModelConnection, "sc"))
_SEARCHABLE = (
    f"SELECT vs.id, {', '.join(table_columns(model, alias) for model, alias in _STORE_ROWS)} "
    f"FROM {VectorStore._meta.db_table} vs "
    f"JOIN {RagStore._meta.db_table} s ON s.id = vs.store_id "
    f"JOIN {ModelConnection._meta.db_table} sc ON sc.id = s.embedding_connection_id "
    f"WHERE {REACHABLE} AND vs.id = ANY(%s::text[])"
)


async def searchable_stores(*, project: Project, vector_store_ids: list[str]) -> list[RagStore]:
    """The stores behind ``vector_store_ids``, in their order (an id given twice counts once),
    each with its embedding connection loaded, as `search_store` needs it; NotFound naming the
    first id the project cannot reach. On the event loop, one statement."""
    wanted = list(dict.fromkeys(vector_store_ids))
    for vector_store_id in wanted:
        if not is_id(vector_store_id, VECTOR_STORE_PREFIX):
            raise vector_store_not_found(vector_store_id)
    rows = await asyncdb.fetch_all(_SEARCHABLE, (project.pk, project.store_id, wanted))
    found = {}
    for row in rows:
        store, embedder = row_instances(row[1:], _STORE_ROWS)
        store.embedding_connection = embedder
        found[row[0]] = store
    for vector_store_id in wanted:
        if vector_store_id not in found:
            raise vector_store_not_found(vector_store_id)
    return [found[vector_store_id] for vector_store_id in wanted]


_FILES_OF_DOCUMENTS = (
    f"SELECT d.id, f.file_id, d.filename FROM {Document._meta.db_table} d "
    f"LEFT JOIN {VectorStoreFile._meta.db_table} f ON f.document_id = d.id "
    "WHERE d.id = ANY(%s::bigint[])"
)


async def files_of_documents(*, document_ids: list[int]) -> dict[int, tuple[str, str]]:
    """Each document's (file id, filename): the uploaded file it was attached from, else the
    document's own stable id (`vector_store_ids.document_file_id`: a document an admin uploaded
    into a store in the dashboard). A document no longer there is left out. On the event loop."""
    rows = await asyncdb.fetch_all(_FILES_OF_DOCUMENTS, (list(document_ids),))
    return {
        document_id: (file_id or document_file_id(document_id), filename) for document_id, file_id, filename in rows
    }
