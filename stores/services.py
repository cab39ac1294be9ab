"""Services that write RAG stores and their documents."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Sum

from gateway.models import ModelConnection, ProviderType
from gateway.providers.embeddings import ProviderError
from gateway.services import embedding_width
from ingestion.chunking import UnknownStrategy, parse_strategy
from ingestion.parsing import UnsupportedFormat, check_upload
from ragmux.errors import Conflict, InvalidInput, ServiceError
from retrieval.backends import backend_available
from stores.models import Document, DocumentStatus, RagStore
from stores.quotas import MIB, Limits, Usage, effective_limit, quota_violation
from stores.text_stats import lock_store_stats, remove_document_terms
from stores.vector_tables import MAX_INDEXED_DIMS

logger = logging.getLogger("ragmux.stores")

BACKLOG_FULL = "the ingestion backlog is full (MAX_PENDING_DOCUMENTS), retry later"
WIDTH_PROBE_TIMEOUT = 15.0
RERANK_CONNECTION_TYPES = {"cohere": {ProviderType.COHERE_RERANK}, "voyage": {ProviderType.VOYAGE_RERANK}}
CHAT_TYPES = {
    ProviderType.OPENAI,
    ProviderType.CUSTOM_OPENAI,
    ProviderType.OLLAMA,
    ProviderType.GEMINI,
    ProviderType.ANTHROPIC,
}
# Settings whose change alters the chunks, and so what is stored and embedded.
CHUNK_SHAPING_FIELDS = ("chunk_size", "chunk_overlap", "contextual_chunks", "chunking_strategy")
MIME_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "markdown": "text/markdown",
    "text": "text/plain",
}

STORE_DEFAULTS: dict[str, Any] = {
    "chunk_size": 1000,
    "chunk_overlap": 200,
    "chunking_strategy": "section",
    "contextual_chunks": True,
    "top_k": 5,
    "search_mode": "hybrid",
    "search_backend": "bm25",
    "fts_config": "simple",
    "fusion_weights": {"vector": 1.0, "lexical": 1.0},
    "typo_tolerance": False,
    "rerank": False,
    "rerank_backend": "llm",
    "rerank_connection_id": None,
    "rerank_candidates": 15,
    "max_distance": 0.0,
    "max_documents": 0,
    "max_bytes": 0,
}


class BacklogFull(ServiceError):
    status = 503
    code = "backlog_full"


class QuotaExceeded(ServiceError):
    status = 422
    code = "store_quota"


# --------------------------------------------------------------------------------------------
# Stores
# --------------------------------------------------------------------------------------------


def _text_search_config_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s", [name])
        return cursor.fetchone() is not None


def _connection(connection_id: int | None, field_name: str) -> ModelConnection | None:
    if connection_id is None:
        return None
    found = ModelConnection.objects.filter(pk=connection_id).first()
    if found is None:
        raise InvalidInput(f"connection {connection_id} does not exist", field=field_name)
    return found


def _validate_store_values(values: dict[str, Any]) -> dict[str, Any]:
    """Checks the rules that span fields or need the database; returns normalised values."""
    embedding = _connection(values["embedding_connection_id"], "embedding_connection_id")
    if embedding is None:
        raise InvalidInput("embedding_connection_id is required", field="embedding_connection_id")
    if not embedding.supports_embeddings:
        raise InvalidInput(
            f'provider "{embedding.provider_type}" cannot be used for embeddings', field="embedding_connection_id"
        )
    if values["chunk_overlap"] >= values["chunk_size"]:
        raise InvalidInput("chunk_overlap must be smaller than chunk_size", field="chunk_overlap")
    try:
        values["chunking_strategy"] = parse_strategy(values["chunking_strategy"])
    except UnknownStrategy as exc:
        raise InvalidInput(str(exc), field="chunking_strategy") from None
    backend = backend_available(values["search_backend"])
    if not backend.available:
        raise InvalidInput(f'search_backend "{backend.id}" is not available: {backend.reason}', field="search_backend")
    values["fts_config"] = values["fts_config"].strip().lower()
    if not _text_search_config_exists(values["fts_config"]):
        raise InvalidInput(
            f'fts_config "{values["fts_config"]}" is not a text search configuration on this server',
            field="fts_config",
        )
    weights = values["fusion_weights"]
    if weights["vector"] == 0 and weights["lexical"] == 0:
        raise InvalidInput("fusion_weights cannot both be 0", field="fusion_weights")
    rerank_connection = _connection(values["rerank_connection_id"], "rerank_connection_id")
    allowed = RERANK_CONNECTION_TYPES.get(values["rerank_backend"], CHAT_TYPES)
    if rerank_connection is not None and rerank_connection.provider_type not in allowed:
        raise InvalidInput(
            f'cannot use connection "{rerank_connection.name}" for reranking: '
            f"it is a {rerank_connection.provider_type} connection",
            field="rerank_connection_id",
        )
    if values["rerank"] and values["rerank_backend"] in RERANK_CONNECTION_TYPES and rerank_connection is None:
        raise InvalidInput(
            f"rerank_connection_id is required for the {values['rerank_backend']} reranker",
            field="rerank_connection_id",
        )
    return values


def warn_about_fts_config(store: RagStore) -> None:
    if store.search_backend == "pgvector" and store.fts_config != "simple":
        logger.warning(
            "store %s (%s): fts_config %r parses queries differently from the `simple` index; "
            "stemmed or stop-worded queries can miss chunks",
            store.pk,
            store.name,
            store.fts_config,
        )


def _probe_width(connection_: ModelConnection) -> None:
    """Refuses a model wider than we can index; an unreachable model is checked at first ingest."""
    try:
        width = embedding_width(connection_, timeout=WIDTH_PROBE_TIMEOUT)
    except ProviderError as exc:
        logger.warning("width probe of connection %s failed, checking at first ingest: %s", connection_.name, exc)
        return
    if width > MAX_INDEXED_DIMS:
        raise InvalidInput(
            f"the embedding model returns {width} dimensions; ragmux indexes at most {MAX_INDEXED_DIMS} "
            f"(choose a model, or a dimensions setting, of {MAX_INDEXED_DIMS} or fewer)",
            field="embedding_connection_id",
        )


def _apply(store: RagStore, values: dict[str, Any]) -> None:
    for name, value in values.items():
        setattr(store, name, value)


def store_create(*, name: str, values: dict[str, Any]) -> RagStore:
    values = _validate_store_values({**STORE_DEFAULTS, **values})
    if RagStore.objects.filter(name=name).exists():
        raise Conflict(f"a store named {name!r} already exists", code="duplicate_name")
    _probe_width(ModelConnection.objects.get(pk=values["embedding_connection_id"]))
    try:
        with transaction.atomic():
            store = RagStore(name=name)
            _apply(store, values)
            store.save()
    except IntegrityError:
        raise Conflict(f"a store named {name!r} already exists", code="duplicate_name") from None
    warn_about_fts_config(store)
    return store


@dataclass
class StoreUpdate:
    store: RagStore
    reprocess_recommended: bool


def store_update(*, store: RagStore, name: str, values: dict[str, Any]) -> StoreUpdate:
    current = {field_name: getattr(store, field_name) for field_name in STORE_DEFAULTS}
    current["embedding_connection_id"] = store.embedding_connection_id
    merged = _validate_store_values({**current, **values})
    if RagStore.objects.filter(name=name).exclude(pk=store.pk).exists():
        raise Conflict(f"a store named {name!r} already exists", code="duplicate_name")
    connection_changed = merged["embedding_connection_id"] != store.embedding_connection_id
    if connection_changed:
        if store.dimensions is not None or Document.objects.filter(store=store, chunk_count__gt=0).exists():
            raise Conflict(
                "the embedding connection is fixed once the store holds chunks; create a new store instead",
                code="embedding_connection_locked",
            )
        _probe_width(ModelConnection.objects.get(pk=merged["embedding_connection_id"]))
    shaping_changed = any(merged[f] != current[f] for f in CHUNK_SHAPING_FIELDS)
    with transaction.atomic():
        locked = RagStore.objects.select_for_update().get(pk=store.pk)
        locked.name = name
        _apply(locked, merged)
        locked.save()
        has_documents = Document.objects.filter(store=locked).exists()
    warn_about_fts_config(locked)
    return StoreUpdate(store=locked, reprocess_recommended=shaping_changed and has_documents)


def store_delete(*, store: RagStore) -> None:
    # Documents, chunks, vectors and term statistics go with it (ON DELETE CASCADE).
    RagStore.objects.filter(pk=store.pk).delete()


# --------------------------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------------------------

_UNSAFE_FILENAME = re.compile(r"[\x00-\x1f\x7f/\\]+")


def sanitise_filename(name: str) -> str:
    name = os.path.basename(name.replace("\\", "/"))
    name = unicodedata.normalize("NFC", _UNSAFE_FILENAME.sub(" ", name))
    name = " ".join(name.split()).strip(". ")
    if len(name) > 200:
        stem, dot, extension = name.rpartition(".")
        name = (stem[: 200 - len(extension) - 1] + dot + extension) if dot else name[:200]
    return name or "document"


@dataclass(frozen=True)
class IncomingFile:
    filename: str
    data: bytes
    title: str = ""
    source: str = ""
    tags: tuple[str, ...] = ()


@dataclass
class UploadResult:
    """The documents this request created, and why it stopped early if it did."""

    documents: list[Document] = field(default_factory=list)
    error: ServiceError | None = None


def _pending_documents() -> int:
    return Document.objects.filter(status=DocumentStatus.PENDING).count()


def _usage(store: RagStore) -> Usage:
    totals = Document.objects.filter(store=store).aggregate(n=Count("id"), size=Sum("size_bytes"))
    return Usage(documents=totals["n"], bytes=totals["size"] or 0)


def store_limits(store: RagStore) -> Limits:
    return Limits(
        documents=effective_limit(store.max_documents, settings.MAX_DOCUMENTS_PER_STORE),
        bytes=effective_limit(store.max_bytes, settings.MAX_BYTES_PER_STORE_MB * MIB),
    )


def _wake_ingestion() -> None:
    from ingestion.tasks import wake_ingestion

    transaction.on_commit(wake_ingestion)


def _check_formats(files: list[IncomingFile]) -> list[str]:
    formats = []
    for incoming in files:
        try:
            formats.append(check_upload(incoming.filename, incoming.data[:8]))
        except UnsupportedFormat as exc:
            raise ServiceError(str(exc), code="unsupported_format", status=400) from None
    return formats


def _create_document(store: RagStore, incoming: IncomingFile, file_format: str) -> Document:
    """Creates one document under the store's lock, after the quota and duplicate checks."""
    with transaction.atomic():
        locked = RagStore.objects.select_for_update().get(pk=store.pk)
        digest = hashlib.sha256(incoming.data).hexdigest()
        existing = Document.objects.filter(store=locked, content_sha256=digest, size_bytes__gt=0).first()
        if existing is not None:
            raise Conflict(
                f'"{incoming.filename}" is identical to document {existing.pk} ("{existing.filename}") in this store',
                code="duplicate_document",
                existing_document_id=existing.pk,
            )
        violation = quota_violation(usage=_usage(locked), limits=store_limits(locked), upload_bytes=len(incoming.data))
        if violation:
            raise QuotaExceeded(violation)
        backlog_full = _pending_documents() >= settings.MAX_PENDING_DOCUMENTS
        document = Document.objects.create(
            store=locked,
            filename=incoming.filename,
            title=incoming.title,
            source=incoming.source,
            tags=list(incoming.tags),
            mime=MIME_TYPES[file_format],
            original=incoming.data,
            size_bytes=len(incoming.data),
            content_sha256=digest,
            status=DocumentStatus.FAILED if backlog_full else DocumentStatus.PENDING,
            error=BACKLOG_FULL if backlog_full else "",
        )
        if not backlog_full:
            _wake_ingestion()
    return document


def document_upload(*, store: RagStore, files: list[IncomingFile]) -> UploadResult:
    """Stores each file as a pending document, in order, each in its own transaction.

    Formats are checked for every file before anything is written. A quota or duplicate
    refusal stops the request; the documents accepted before it stay. On a full backlog the
    documents are kept as failed with the backlog message.
    """
    if not files:
        raise InvalidInput("no file field in form (use 'file')", field="file")
    formats = _check_formats(files)
    result = UploadResult()
    for incoming, file_format in zip(files, formats, strict=True):
        try:
            document = _create_document(store, incoming, file_format)
        except (QuotaExceeded, Conflict) as exc:
            result.error = exc
            return result
        result.documents.append(document)
        if document.status == DocumentStatus.FAILED and result.error is None:
            result.error = BacklogFull(BACKLOG_FULL)
    return result


def text_document_filename(title: str) -> str:
    # A title is not a path: its slashes are kept apart as words, not taken as folders.
    return sanitise_filename(_UNSAFE_FILENAME.sub(" ", title).strip() or "untitled") + ".txt"


def document_ingest_text(*, store: RagStore, title: str, content: str, source: str, tags: list[str]) -> UploadResult:
    data = content.encode("utf-8")
    limit = settings.TEXT_INGEST_MAX_MB * MIB
    if len(data) > limit:
        raise ServiceError(
            f"content is {math.ceil(len(data) / MIB)} MiB; the limit is {settings.TEXT_INGEST_MAX_MB} MiB "
            "(TEXT_INGEST_MAX_MB)",
            code="content_too_large",
            status=413,
        )
    if not content.strip():
        raise InvalidInput("content is empty", field="content")
    incoming = IncomingFile(
        filename=text_document_filename(title), data=data, title=title.strip(), source=source, tags=tuple(tags)
    )
    return document_upload(store=store, files=[incoming])


def document_delete(*, document: Document) -> None:
    """Deletes a document with its chunks, vectors and term statistics.

    A worker still processing it finds its claim gone at the next lease check and stops
    without writing anything.
    """
    with transaction.atomic():
        lock_store_stats(document.store_id)
        remove_document_terms(store_id=document.store_id, document_id=document.pk)
        Document.objects.filter(pk=document.pk).delete()


def _queue_again(documents) -> tuple[int, int]:
    """Puts documents back in the queue; past the backlog limit they are failed instead.

    The fencing token moves on, so a worker still holding an old claim writes nothing.
    Returns (queued, refused).
    """
    room = max(0, settings.MAX_PENDING_DOCUMENTS - _pending_documents())
    ids = [document.pk for document in documents]
    reset = {
        "progress_percent": 0,
        "attempts": 0,
        "lease_owner": "",
        "lease_expires_at": None,
        "lease_token": F("lease_token") + 1,
    }
    queued, refused = ids[:room], ids[room:]
    Document.objects.filter(pk__in=queued).update(status=DocumentStatus.PENDING, error="", **reset)
    Document.objects.filter(pk__in=refused).update(status=DocumentStatus.FAILED, error=BACKLOG_FULL, **reset)
    if queued:
        _wake_ingestion()
    return len(queued), len(refused)


@transaction.atomic
def document_reprocess(*, document: Document) -> Document:
    locked = Document.objects.select_for_update().get(pk=document.pk)
    _, refused = _queue_again([locked])
    if refused:
        raise BacklogFull(BACKLOG_FULL)
    locked.refresh_from_db()
    return locked


@transaction.atomic
def store_reprocess_all(*, store: RagStore) -> int:
    """Re-parses, re-chunks and re-embeds every document of the store. Never blocked by quotas."""
    documents = list(Document.objects.select_for_update().filter(store=store).order_by("id").only("id"))
    queued, refused = _queue_again(documents)
    if refused:
        raise BacklogFull(f"{BACKLOG_FULL}; {queued} of {len(documents)} documents were queued", queued=queued)
    return queued
