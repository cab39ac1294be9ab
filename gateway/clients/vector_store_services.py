"""Writes of files and vector stores: a vector store is a RAG store the project owns, made with
the instance's defaults, and attaching a file stores a document of its bytes through ingestion's
upload service (the same queue, parsers, limits, quotas and dedup as the dashboard's uploads)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from gateway.clients.models import ClientFile, Project, VectorStore, VectorStoreFile, VectorStoreFileBatch
from gateway.clients.vector_store_ids import new_file_batch_id, new_file_id, new_vector_store_id
from gateway.connections.models import ModelConnection
from gateway.connections.selectors import default_embedding_connection
from ingestion.services import IncomingFile, SkippedFile, document_upload, sanitise_filename, upload_refusal
from ragmux.core.errors import Forbidden, InvalidInput
from stores import services as store_services
from stores.models import Document, DocumentStatus, RagStore

# The longest part of a project's name in its stores' names (RagStore.name is 100 characters).
STORE_NAME_PROJECT_CHARS = 60


def owned_store_name(project: Project, vector_store_id: str) -> str:
    """The name of the store behind a vector store: unique across the instance (the vector store's
    id is), and saying whose it is in the dashboard."""
    return f"{project.name[:STORE_NAME_PROJECT_CHARS]} / {vector_store_id}"


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def file_create(*, project: Project, filename: str, purpose: str, data: bytes) -> ClientFile:
    """Keeps an uploaded file, refused as ingestion refuses an upload it could never index (an
    empty file, a format we do not read, more text than a document may hold)."""
    filename = sanitise_filename(filename)
    refused = upload_refusal(IncomingFile(filename=filename, data=data))
    if isinstance(refused, SkippedFile):
        raise InvalidInput(refused.message, field="file", code=refused.code)
    return ClientFile.objects.create(
        id=new_file_id(),
        project=project,
        filename=filename,
        purpose=purpose,
        content=data,
        size_bytes=len(data),
        content_sha256=hashlib.sha256(data).hexdigest(),
    )


def file_delete(*, client_file: ClientFile) -> None:
    """Deletes the file; what it became in vector stores stays (their documents hold their own
    bytes), as OpenAI keeps a vector store's files when the file goes."""
    ClientFile.objects.filter(pk=client_file.pk).delete()


# --------------------------------------------------------------------------------------------
# Vector stores
# --------------------------------------------------------------------------------------------


def _embedding_connection(project: Project) -> ModelConnection:
    """What a new vector store embeds with: the instance's default (its local model, else its only
    connection that can embed), else the project's embedding connection, else its store's."""
    connections = [c for c in ModelConnection.objects.order_by("id") if c.supports_embeddings]
    chosen = default_embedding_connection(connections) or project.embedding_connection
    if chosen is None and project.store is not None:
        chosen = project.store.embedding_connection
    if chosen is None:
        raise InvalidInput(
            "no embedding connection to create a vector store with: an admin must give the project one",
            code="no_embedding_connection",
        )
    return chosen


def given_vector_store(*, project: Project) -> VectorStore | None:
    """The row under which the store an admin gave the project appears as a vector store, made
    on first reach; None when the project has no store."""
    if project.store_id is None:
        return None
    existing = VectorStore.objects.filter(project=project, store_id=project.store_id).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return VectorStore.objects.create(
                id=new_vector_store_id(),
                project=project,
                store_id=project.store_id,
                owned=False,
                name=project.store.name,
            )
    except IntegrityError:
        # Made by a concurrent first reach.
        return VectorStore.objects.get(project=project, store_id=project.store_id)


def vector_store_create(
    *,
    project: Project,
    name: str,
    metadata: dict[str, str],
    expires_after_days: int | None,
    chunking: dict[str, int],
) -> VectorStore:
    """A new store of the instance's defaults (``chunking``: its chunk_size and chunk_overlap
    when the client chose them) and the vector store over it."""
    vector_store_id = new_vector_store_id()
    values = {"embedding_connection_id": _embedding_connection(project).pk, **chunking}
    store = store_services.store_create(name=owned_store_name(project, vector_store_id), values=values)
    return VectorStore.objects.create(
        id=vector_store_id,
        project=project,
        store=store,
        owned=True,
        name=name,
        metadata=metadata,
        expires_after_days=expires_after_days,
    )


def vector_store_update(*, vector_store: VectorStore, changes: dict[str, Any]) -> VectorStore:
    for field_name in ("name", "metadata", "expires_after_days"):
        if field_name in changes:
            setattr(vector_store, field_name, changes[field_name])
    vector_store.save()
    return vector_store


def vector_store_delete(*, vector_store: VectorStore) -> None:
    """Deletes an owned vector store with its store (documents, chunks, vectors); the store an
    admin gave the project is the admin's to delete."""
    if not vector_store.owned:
        raise Forbidden(
            "this vector store is the project's store, given by an admin: it cannot be deleted with a key",
            code="given_store",
        )
    store_services.store_delete(store=vector_store.store)


# --------------------------------------------------------------------------------------------
# A vector store's files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attachment:
    client_file: ClientFile
    attributes: dict[str, Any]


def _admitted(store: RagStore, attachment: Attachment) -> tuple[Document | None, str, str]:
    """The document the file became in the store, or why it did not: (None, code, message)."""
    incoming = IncomingFile(
        filename=attachment.client_file.filename,
        data=bytes(attachment.client_file.content),
        attributes=attachment.attributes,
    )
    result = document_upload(store=store, files=[incoming])
    if result.documents:
        return result.documents[0], "", ""
    if result.skipped:
        return None, result.skipped[0].code, result.skipped[0].message
    return None, result.refusal.code, result.refusal.message


def vector_store_file_attach(
    *, vector_store: VectorStore, attachment: Attachment, batch: VectorStoreFileBatch | None = None
) -> VectorStoreFile:
    """Attaches a file: a document of its bytes in the store, queued for ingestion. A file already
    attached to the vector store is answered as it is; a file the store refuses (a duplicate of
    another document, a full quota) is attached as failed, with why."""
    existing = VectorStoreFile.objects.filter(vector_store=vector_store, file=attachment.client_file).first()
    if existing is not None:
        return existing
    document, code, message = _admitted(vector_store.store, attachment)
    try:
        with transaction.atomic():
            return VectorStoreFile.objects.create(
                vector_store=vector_store,
                file=attachment.client_file,
                document=document,
                batch=batch,
                refusal_code=code,
                refusal_message=message[:512],
            )
    except IntegrityError:
        # Attached by a concurrent call, whose document is the file's: this one's goes.
        if document is not None:
            store_services.document_delete(document=document)
        return VectorStoreFile.objects.get(vector_store=vector_store, file=attachment.client_file)


def _document(vector_store_file: VectorStoreFile) -> Document:
    """The file's document without its original bytes (what the store services need of it)."""
    return Document.objects.defer("original").get(pk=vector_store_file.document_id)


def vector_store_file_update(*, vector_store_file: VectorStoreFile, attributes: dict[str, Any]) -> VectorStoreFile:
    """Replaces the attributes of the file's document (what searches filter on)."""
    if vector_store_file.document_id is None:
        raise InvalidInput(
            "this file is not in the vector store's index (it failed or was cancelled)", code="no_document"
        )
    vector_store_file.document = store_services.document_update(
        document=_document(vector_store_file), values={"attributes": attributes}
    )
    return vector_store_file


def vector_store_file_delete(*, vector_store_file: VectorStoreFile) -> None:
    """Detaches the file: its document leaves the store (its chunks and vectors with it)."""
    with transaction.atomic():
        if vector_store_file.document_id is not None:
            # The attachment goes with its document (ON DELETE CASCADE).
            store_services.document_delete(document=_document(vector_store_file))
        else:
            VectorStoreFile.objects.filter(pk=vector_store_file.pk).delete()


def file_batch_create(*, vector_store: VectorStore, attachments: list[Attachment]) -> VectorStoreFileBatch:
    batch = VectorStoreFileBatch.objects.create(id=new_file_batch_id(), vector_store=vector_store)
    for attachment in attachments:
        attached = vector_store_file_attach(vector_store=vector_store, attachment=attachment, batch=batch)
        if attached.batch_id is None:
            # Attached before, alone: it counts in this batch too.
            VectorStoreFile.objects.filter(pk=attached.pk).update(batch=batch)
    return batch


def file_batch_cancel(*, batch: VectorStoreFileBatch) -> VectorStoreFileBatch:
    """Cancels the batch: its files still waiting in the queue leave it (their documents go) and
    are reported cancelled; those being read or done stay as they are."""
    with transaction.atomic():
        batch = VectorStoreFileBatch.objects.select_for_update().get(pk=batch.pk)
        waiting = VectorStoreFile.objects.filter(batch=batch, document__status=DocumentStatus.PENDING)
        for vector_store_file in waiting:
            document = _document(vector_store_file)
            VectorStoreFile.objects.filter(pk=vector_store_file.pk).update(document=None, cancelled=True)
            store_services.document_delete(document=document)
        batch.cancelled = True
        batch.save(update_fields=["cancelled"])
    return batch
