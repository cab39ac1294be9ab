"""Reads of files, vector stores and their files: what a project may reach, and the file each
searched document came from."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet, Sum

from gateway.clients.models import ClientFile, Project, VectorStore, VectorStoreFile, VectorStoreFileBatch
from gateway.clients.selectors import row_instances, table_columns
from gateway.clients.vector_store_ids import (
    FILE_BATCH_PREFIX,
    FILE_PREFIX,
    VECTOR_STORE_PREFIX,
    document_file_id,
    is_id,
)
from gateway.clients.vector_store_shapes import CANCELLED, FAILED, FileState, document_statuses, file_counts
from gateway.connections.models import ModelConnection
from ragmux.core import asyncdb
from ragmux.core.errors import InvalidInput, NotFound
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


# --------------------------------------------------------------------------------------------
# What the endpoints read (in a worker thread: the ORM)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageRequest:
    """A list's page as OpenAI asks for it: `limit`, `order` (newest first unless `asc`) and
    `after`, the public id of the last item of the previous page."""

    limit: int
    newest_first: bool
    after: str | None


def _page(rows: QuerySet, page: PageRequest, *, id_field: str = "pk") -> tuple[list, bool]:
    """One page of ``rows`` in creation order, and whether more follow."""
    newest_first = page.newest_first
    rows = rows.order_by(*(("-created_at", "-pk") if newest_first else ("created_at", "pk")))
    if page.after is not None:
        anchor = rows.filter(**{id_field: page.after}).values("created_at", "pk").first()
        if anchor is None:
            raise InvalidInput(f"after: no item with id {page.after[:80]!r} in this list", code="invalid_request")
        moment, pk = anchor["created_at"], anchor["pk"]
        beyond = "lt" if newest_first else "gt"
        rows = rows.filter(Q(**{f"created_at__{beyond}": moment}) | Q(created_at=moment, **{f"pk__{beyond}": pk}))
    found = list(rows[: page.limit + 1])
    return found[: page.limit], len(found) > page.limit


def file_not_found(file_id: str) -> NotFound:
    return NotFound(f"no file with id {str(file_id)[:80]!r}")


def _files(project: Project) -> QuerySet[ClientFile]:
    return ClientFile.objects.filter(project=project).defer("content")


def file_get(*, project: Project, file_id: str, with_content: bool = False) -> ClientFile:
    """The project's file of that id; another project's is not found, as none is."""
    files = ClientFile.objects.filter(project=project) if with_content else _files(project)
    found = files.filter(pk=file_id).first() if is_id(file_id, FILE_PREFIX) else None
    if found is None:
        raise file_not_found(file_id)
    return found


def files_by_id(*, project: Project, file_ids: list[str]) -> list[ClientFile]:
    """The project's files of these ids, in their order, with their bytes; NotFound naming the
    first the project does not have."""
    wanted = [file_id for file_id in dict.fromkeys(file_ids) if is_id(file_id, FILE_PREFIX)]
    found = ClientFile.objects.filter(project=project, pk__in=wanted).in_bulk()
    for file_id in file_ids:
        if file_id not in found:
            raise file_not_found(file_id)
    return [found[file_id] for file_id in dict.fromkeys(file_ids)]


def file_list(*, project: Project, purpose: str | None, page: PageRequest) -> tuple[list[ClientFile], bool]:
    files = _files(project)
    if purpose is not None:
        files = files.filter(purpose=purpose)
    return _page(files, page)


def _reachable(project: Project) -> QuerySet[VectorStore]:
    owned_or_given = (Q(owned=True) | Q(store_id=project.store_id)) if project.store_id else Q(owned=True)
    return VectorStore.objects.filter(owned_or_given, project=project).select_related("store")


def vector_store_get(*, project: Project, vector_store_id: str) -> VectorStore:
    found = None
    if is_id(vector_store_id, VECTOR_STORE_PREFIX):
        found = _reachable(project).filter(pk=vector_store_id).first()
    if found is None:
        raise vector_store_not_found(vector_store_id)
    return found


def vector_store_list(*, project: Project, page: PageRequest) -> tuple[list[VectorStore], bool]:
    return _page(_reachable(project), page)


_STATE_COLUMNS = (
    "document__status",
    "document__error",
    "document__error_stage",
    "refusal_code",
    "refusal_message",
    "cancelled",
)


def _states(files: QuerySet[VectorStoreFile]) -> QuerySet:
    return files.values(*_STATE_COLUMNS)


def file_state(row: dict) -> FileState:
    """A vector store file's state from the columns `_states` reads."""
    return FileState(
        document_status=row["document__status"],
        document_error=row["document__error"] or "",
        error_stage=row["document__error_stage"] or "",
        refusal_code=row["refusal_code"],
        refusal_message=row["refusal_message"],
        cancelled=row["cancelled"],
    )


@dataclass(frozen=True)
class Tally:
    """A vector store's (or a batch's) file counts by status, and the bytes its store holds."""

    counts: dict[str, int]
    usage_bytes: int = 0


def tallies(*, vector_stores: list[VectorStore]) -> dict[str, Tally]:
    """Each vector store's file counts and its store's bytes: two statements for any number."""
    statuses: dict[str, list[str]] = {vector_store.pk: [] for vector_store in vector_stores}
    rows = VectorStoreFile.objects.filter(vector_store__in=list(statuses)).values("vector_store_id", *_STATE_COLUMNS)
    for row in rows:
        statuses[row["vector_store_id"]].append(file_state(row).status)
    used = dict(
        Document.objects.filter(store_id__in=[vs.store_id for vs in vector_stores])
        .values("store_id")
        .annotate(total=Sum("size_bytes"))
        .values_list("store_id", "total")
    )
    return {vs.pk: Tally(file_counts(statuses[vs.pk]), used.get(vs.store_id) or 0) for vs in vector_stores}


def batch_tally(*, batch: VectorStoreFileBatch) -> Tally:
    return Tally(file_counts(file_state(row).status for row in _states(VectorStoreFile.objects.filter(batch=batch))))


def _attached(vector_store: VectorStore) -> QuerySet[VectorStoreFile]:
    return (
        VectorStoreFile.objects.filter(vector_store=vector_store).select_related("document").defer("document__original")
    )


def vector_store_file_get(*, vector_store: VectorStore, file_id: str) -> VectorStoreFile:
    found = _attached(vector_store).filter(file_id=file_id).first() if is_id(file_id, FILE_PREFIX) else None
    if found is None:
        raise NotFound(f"no file with id {str(file_id)[:80]!r} in vector store {vector_store.pk}")
    return found


def vector_store_file_list(
    *,
    vector_store: VectorStore,
    status: str | None,
    page: PageRequest,
    batch: VectorStoreFileBatch | None = None,
) -> tuple[list[VectorStoreFile], bool]:
    files = _attached(vector_store)
    if batch is not None:
        files = files.filter(batch=batch)
    if status == CANCELLED:
        files = files.filter(cancelled=True)
    elif status is not None:
        in_status = Q(document__status__in=document_statuses(status))
        if status == FAILED:
            in_status |= Q(document__isnull=True)
        files = files.filter(in_status, cancelled=False)
    return _page(files, page, id_field="file_id")


def file_batch_get(*, vector_store: VectorStore, batch_id: str) -> VectorStoreFileBatch:
    found = None
    if is_id(batch_id, FILE_BATCH_PREFIX):
        found = VectorStoreFileBatch.objects.filter(vector_store=vector_store, pk=batch_id).first()
    if found is None:
        raise NotFound(f"no file batch with id {str(batch_id)[:80]!r} in vector store {vector_store.pk}")
    return found
