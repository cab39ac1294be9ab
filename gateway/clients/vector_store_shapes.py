"""OpenAI's wire shapes of files, vector stores, their files and file batches, and the statuses
they take from our documents: pure functions of the values the selectors read, no database.

A vector store file's status is its document's: pending or processing is `in_progress`, ready is
`completed`, failed is `failed` with the document's error as `last_error`. A file the store
refused (no document) is `failed` with the refusal; one whose batch was cancelled before it
started is `cancelled`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from stores.choices import DocumentStatus, ErrorStage

IN_PROGRESS, COMPLETED, FAILED, CANCELLED = "in_progress", "completed", "failed", "cancelled"
FILE_STATUSES = (IN_PROGRESS, COMPLETED, CANCELLED, FAILED)
_OF_DOCUMENT = {
    DocumentStatus.PENDING: IN_PROGRESS,
    DocumentStatus.PROCESSING: IN_PROGRESS,
    DocumentStatus.READY: COMPLETED,
    DocumentStatus.FAILED: FAILED,
}
# OpenAI's three `last_error` codes: the file is not a format we read, the file cannot be stored
# or read as it is, or something on our side failed (a full backlog, the embedding provider).
UNSUPPORTED_FILE, INVALID_FILE, SERVER_ERROR = "unsupported_file", "invalid_file", "server_error"
_REFUSAL_CODES = {"unsupported_format": UNSUPPORTED_FILE, "backlog_full": SERVER_ERROR}
_STAGE_CODES = {
    ErrorStage.UPLOAD: SERVER_ERROR,
    ErrorStage.PARSE: INVALID_FILE,
    ErrorStage.CHUNK: INVALID_FILE,
    ErrorStage.EMBED: SERVER_ERROR,
    ErrorStage.INDEX: SERVER_ERROR,
}
# OpenAI counts chunks in tokens, our stores in characters: about four characters a token.
CHARS_PER_TOKEN = 4


def timestamp(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


@dataclass(frozen=True)
class FileState:
    """What a vector store file's status is made of: its document's status and error (None and
    "" without a document), the store's refusal, and whether its batch cancelled it."""

    document_status: str | None
    document_error: str = ""
    error_stage: str = ""
    refusal_code: str = ""
    refusal_message: str = ""
    cancelled: bool = False

    @property
    def status(self) -> str:
        if self.cancelled:
            return CANCELLED
        if self.document_status is None:
            return FAILED
        return _OF_DOCUMENT[self.document_status]

    @property
    def last_error(self) -> dict[str, str] | None:
        if self.status != FAILED:
            return None
        if self.document_status is None:
            return {"code": _REFUSAL_CODES.get(self.refusal_code, INVALID_FILE), "message": self.refusal_message}
        message = self.document_error or "the file could not be ingested"
        return {"code": _STAGE_CODES.get(self.error_stage, SERVER_ERROR), "message": message}


def document_statuses(status: str) -> list[str]:
    """The document statuses a vector store file of ``status`` may have (a failed one may also
    have no document; a cancelled one has none)."""
    return [document_status for document_status, of in _OF_DOCUMENT.items() if of == status]


def file_counts(statuses: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(FILE_STATUSES, 0)
    for status in statuses:
        counts[status] += 1
    return {**counts, "total": sum(counts.values())}


def batch_status(counts: dict[str, int], *, cancelled: bool) -> str:
    """A batch is cancelled once cancelled, in progress while a file of it is, failed when every
    file of it failed, else completed."""
    if cancelled:
        return CANCELLED
    if counts[IN_PROGRESS]:
        return IN_PROGRESS
    if counts["total"] and counts[FAILED] == counts["total"]:
        return FAILED
    return COMPLETED


def expires_at(last_active_at: datetime, days: int | None) -> datetime | None:
    return None if days is None else last_active_at + timedelta(days=days)


def vector_store_status(counts: dict[str, int], *, expiry: datetime | None, now: datetime) -> str:
    if expiry is not None and expiry <= now:
        return "expired"
    return IN_PROGRESS if counts[IN_PROGRESS] else COMPLETED


def chunking_strategy(chunk_size: int, chunk_overlap: int) -> dict[str, Any]:
    """The store's chunking, in OpenAI's `static` shape (tokens)."""
    return {
        "type": "static",
        "static": {
            "max_chunk_size_tokens": chunk_size // CHARS_PER_TOKEN,
            "chunk_overlap_tokens": chunk_overlap // CHARS_PER_TOKEN,
        },
    }


def chunking_values(strategy: dict[str, Any] | None) -> dict[str, int]:
    """A validated `chunking_strategy` as a store's settings: `auto` (or none) keeps the store
    defaults, `static` sets chunk_size and chunk_overlap (in characters)."""
    if not strategy or strategy["type"] == "auto":
        return {}
    static = strategy["static"]
    return {
        "chunk_size": static["max_chunk_size_tokens"] * CHARS_PER_TOKEN,
        "chunk_overlap": static["chunk_overlap_tokens"] * CHARS_PER_TOKEN,
    }


def file_object(*, file_id: str, size_bytes: int, created_at: datetime, filename: str, purpose: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size_bytes,
        "created_at": timestamp(created_at),
        "filename": filename,
        "purpose": purpose,
        # Kept as given: nothing more happens to a file until it is attached to a vector store.
        "status": "processed",
        "status_details": None,
        "expires_at": None,
    }


def list_page(data: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def deleted(object_id: str, kind: str) -> dict[str, Any]:
    return {"id": object_id, "object": kind, "deleted": True}


def vector_store_object(vector_store, *, counts: dict[str, int], usage_bytes: int, now: datetime) -> dict[str, Any]:
    """A `VectorStore` row as OpenAI's `vector_store`."""
    expiry = expires_at(vector_store.last_active_at, vector_store.expires_after_days)
    days = vector_store.expires_after_days
    return {
        "id": vector_store.pk,
        "object": "vector_store",
        "created_at": timestamp(vector_store.created_at),
        "name": vector_store.name,
        "description": None,
        "usage_bytes": usage_bytes,
        "file_counts": counts,
        "status": vector_store_status(counts, expiry=expiry, now=now),
        "expires_after": None if days is None else {"anchor": "last_active_at", "days": days},
        "expires_at": timestamp(expiry),
        "last_active_at": timestamp(vector_store.last_active_at),
        "metadata": vector_store.metadata,
    }


def state_of_file(vector_store_file) -> FileState:
    """A `VectorStoreFile` row's state, its document loaded (or None)."""
    document = vector_store_file.document
    return FileState(
        document_status=None if document is None else document.status,
        document_error="" if document is None else document.error,
        error_stage="" if document is None else document.error_stage,
        refusal_code=vector_store_file.refusal_code,
        refusal_message=vector_store_file.refusal_message,
        cancelled=vector_store_file.cancelled,
    )


def vector_store_file_object(vector_store_file, *, store) -> dict[str, Any]:
    """A `VectorStoreFile` row (its document loaded) as OpenAI's `vector_store.file`; ``store``
    is the RAG store behind its vector store, whose chunking it was cut by."""
    state, document = state_of_file(vector_store_file), vector_store_file.document
    return {
        "id": vector_store_file.file_id,
        "object": "vector_store.file",
        "usage_bytes": 0 if document is None else document.size_bytes,
        "created_at": timestamp(vector_store_file.created_at),
        "vector_store_id": vector_store_file.vector_store_id,
        "status": state.status,
        "last_error": state.last_error,
        "chunking_strategy": chunking_strategy(store.chunk_size, store.chunk_overlap),
        "attributes": {} if document is None else document.attributes,
    }


def batch_object(batch, *, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "id": batch.pk,
        "object": "vector_store.files_batch",
        "created_at": timestamp(batch.created_at),
        "vector_store_id": batch.vector_store_id,
        "status": batch_status(counts, cancelled=batch.cancelled),
        "file_counts": counts,
    }


def search_result(hit, *, file_id: str) -> dict[str, Any]:
    """A search hit (retrieval's `Hit`) as one of OpenAI's vector store search results: scored by
    the reranker when one ranked it, else by the store's fused score."""
    return {
        "file_id": file_id,
        "filename": hit.filename,
        "score": hit.score if hit.rerank_score is None else hit.rerank_score,
        "attributes": hit.attributes,
        "content": [{"type": "text", "text": hit.content}],
    }
