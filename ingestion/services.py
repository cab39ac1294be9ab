"""Admission: documents enter a store here (upload, text ingest) and go back to the queue here
(reprocess, retry). Every status these set goes through :mod:`ingestion.queue`."""

from __future__ import annotations

import hashlib
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field

import psycopg
from django.conf import settings
from django.db import connection, transaction
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format

from ingestion import queue
from ingestion.parsing import SNIFF_WINDOW, UnsupportedFormat, check_upload
from ingestion.parsing.types import MAX_EXTRACTED_TEXT
from ragmux.core.errors import Conflict, InvalidInput, LimitReached, ServiceError, TooLarge, Unavailable
from ragmux.core.units import MIB
from ragmux.core.wakeups import send_on_commit
from stores.models import Document, DocumentStatus, RagStore
from stores.quotas import quota_violation
from stores.selectors import store_limits, store_usage
from stores.services import audit_document, audit_store, document_snapshot

# Formats whose whole file becomes the extracted text: one larger than the cap on extracted text
# can only fail, so it is refused before it is stored.
WHOLE_TEXT_FORMATS = ("text", "markdown")
MIME_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "csv": "text/csv",
    "epub": "application/epub+zip",
    "email": "message/rfc822",
    "png": "image/png",
    "jpeg": "image/jpeg",
    "tiff": "image/tiff",
    "webp": "image/webp",
    "html": "text/html",
    "markdown": "text/markdown",
    "text": "text/plain",
}


class QuotaExceeded(LimitReached):
    code = "store_quota"


class BacklogFull(Unavailable):
    code = "backlog_full"


# Every file of a request was skipped: the status follows why (see document_upload).
class AllDuplicates(Conflict):
    code = "duplicate_document"


class AllTooLarge(TooLarge):
    code = "text_too_large"


class AllRefused(InvalidInput):
    pass


_UNSAFE_FILENAME = re.compile(r"[\x00-\x1f\x7f/\\]+")


def sanitise_filename(name: str) -> str:
    name = os.path.basename(name.replace("\\", "/"))
    name = unicodedata.normalize("NFC", _UNSAFE_FILENAME.sub(" ", name))
    # Leading dots stay: ".txt" is a text file's name, not a path.
    name = " ".join(name.split()).rstrip(". ")
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
    attributes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedFile:
    filename: str
    code: str
    message: str
    existing_document_id: int | None = None


@dataclass
class UploadResult:
    """What one request stored, what it skipped and why, and the refusal to answer with when
    it stopped early or stored nothing (the lists go with it)."""

    documents: list[Document] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    refusal: ServiceError | None = None


def _wake_ingestion() -> None:
    from ingestion.tasks import drain_queue

    send_on_commit(drain_queue)


def upload_refusal(incoming: IncomingFile) -> SkippedFile | str:
    """The file's format, or why it is skipped before anything is stored."""
    if not incoming.data:
        # It could only fail as a document with no text.
        return SkippedFile(incoming.filename, "empty_file", f'"{incoming.filename}" is empty (0 bytes)')
    try:
        file_format = check_upload(incoming.filename, incoming.data[:SNIFF_WINDOW])
    except UnsupportedFormat as exc:
        return SkippedFile(incoming.filename, "unsupported_format", str(exc))
    if file_format in WHOLE_TEXT_FORMATS and len(incoming.data) > MAX_EXTRACTED_TEXT:
        return SkippedFile(
            incoming.filename,
            "text_too_large",
            f'"{incoming.filename}" is {math.ceil(len(incoming.data) / MIB)} MiB of text; '
            f"at most {MAX_EXTRACTED_TEXT // MIB} MiB of text is indexed per document",
        )
    return file_format


class _BytesAsGiven(Dumper):
    """Hands libpq the caller's bytes: psycopg's own binary dumper for bytes (the C one) first
    copies them into a buffer of its own."""

    format = Format.BINARY
    oid = postgres.types["bytea"].oid

    def dump(self, obj: bytes) -> bytes:
        return obj


def _store_original(document: Document, data: bytes) -> None:
    """Writes the original bytes as one binary parameter, bound by the server.

    The ORM binds on the client: it would splice the bytes into the SQL as a hex literal, about
    eight copies of their size on the way to libpq (escaped, quoted, spliced, buffered). Here
    the only copy besides ``data`` is libpq's send buffer.
    """
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.adapters.register_dumper(bytes, _BytesAsGiven)
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(Document._meta.db_table)} SET original = %b WHERE id = %s",
            (data, document.pk),
        )
    # Deferred, as if loaded without it: the response's serializer keeps the instance, and a DRF
    # view and its response form a reference cycle that outlives the request until a GC.
    del document.original


def _create_document(store: RagStore, incoming: IncomingFile, file_format: str, actor) -> Document | SkippedFile:
    """Creates one document under the store's lock, after the duplicate and quota checks; its
    audit row is written in the same transaction."""
    with transaction.atomic():
        # NO KEY: rows written below the store (a lexical rebuild's postings, an ingest's chunks)
        # hold a key-share lock on it while they are written; admission must not wait for them.
        locked = RagStore.objects.select_for_update(no_key=True).get(pk=store.pk)
        digest = hashlib.sha256(incoming.data).hexdigest()
        existing = Document.objects.filter(store=locked, content_sha256=digest, size_bytes__gt=0).first()
        if existing is not None:
            return SkippedFile(
                incoming.filename,
                "duplicate_document",
                f'"{incoming.filename}" is identical to document {existing.pk} ("{existing.filename}") in this store',
                existing_document_id=existing.pk,
            )
        violation = quota_violation(
            usage=store_usage(locked), limits=store_limits(locked), upload_bytes=len(incoming.data)
        )
        if violation:
            raise QuotaExceeded(violation, filename=incoming.filename)
        document = Document.objects.create(
            store=locked,
            filename=incoming.filename,
            title=incoming.title,
            source=incoming.source,
            tags=list(incoming.tags),
            attributes=incoming.attributes,
            mime=MIME_TYPES[file_format],
            size_bytes=len(incoming.data),
            content_sha256=digest,
            **queue.admission_status(),
        )
        _store_original(document, incoming.data)
        if document.status == DocumentStatus.PENDING:
            _wake_ingestion()
        audit_document(document, actor=actor, action="document.upload", after=document_snapshot(document))
    return document


def _nothing_stored(skipped: list[SkippedFile]) -> ServiceError:
    codes = {file.code for file in skipped}
    message = skipped[0].message if len(skipped) == 1 else f"none of the {len(skipped)} files was stored"
    if codes == {"duplicate_document"}:
        # One duplicate names its twin in the error too, as a single upload always did.
        twin = {"existing_document_id": skipped[0].existing_document_id} if len(skipped) == 1 else {}
        return AllDuplicates(message, **twin)
    if codes == {"text_too_large"}:
        return AllTooLarge(message)
    return AllRefused(message, code=codes.pop() if len(codes) == 1 else "nothing_stored")


def document_upload(*, store: RagStore, files: list[IncomingFile], actor=None) -> UploadResult:
    """Stores each file as a document, in order, each in its own transaction, with one audit
    row per document stored (a skipped file stores nothing and writes none).

    A duplicate, an empty file, an unsupported format (by its extension or its first bytes) or
    a text file too large to index is skipped with its reason and the other files are stored.
    A quota refusal stops the request: the documents stored before it stay and are listed. On
    a full backlog documents are kept as failed (at upload) with the backlog message. A request
    that stores nothing answers 409 when every file was a duplicate, 413 when every file was
    too large, else 400.
    """
    if not files:
        raise InvalidInput("no file field in form (use 'file')", field="file")
    result = UploadResult()
    for incoming in files:
        outcome = upload_refusal(incoming)
        if isinstance(outcome, str):
            try:
                outcome = _create_document(store, incoming, outcome, actor)
            except QuotaExceeded as exc:
                # Without the traceback: its frames hold the file's bytes, and the result holding
                # it closes a reference cycle that would keep them after the request until a GC.
                result.refusal = exc.with_traceback(None)
                return result
        if isinstance(outcome, SkippedFile):
            result.skipped.append(outcome)
        else:
            result.documents.append(outcome)
    if not result.documents:
        result.refusal = _nothing_stored(result.skipped)
    elif any(document.status == DocumentStatus.FAILED for document in result.documents):
        result.refusal = BacklogFull(queue.BACKLOG_FULL)
    return result


def text_document_filename(title: str) -> str:
    # A title is not a path: its slashes are kept apart as words, not taken as folders.
    return sanitise_filename(_UNSAFE_FILENAME.sub(" ", title).strip() or "untitled") + ".txt"


def document_ingest_text(
    *,
    store: RagStore,
    title: str,
    content: str,
    source: str,
    tags: list[str],
    attributes: dict | None = None,
    actor=None,
) -> UploadResult:
    data = content.encode("utf-8")
    limit = settings.TEXT_INGEST_MAX_MB * MIB
    if len(data) > limit:
        raise TooLarge(
            f"content is {math.ceil(len(data) / MIB)} MiB; the limit is {settings.TEXT_INGEST_MAX_MB} MiB "
            "(TEXT_INGEST_MAX_MB)",
            code="content_too_large",
        )
    if not content.strip():
        raise InvalidInput("content is empty", field="content")
    incoming = IncomingFile(
        filename=text_document_filename(title),
        data=data,
        title=title.strip(),
        source=source,
        tags=tuple(tags),
        attributes=attributes or {},
    )
    return document_upload(store=store, files=[incoming], actor=actor)


def _requeue(document_ids: list[int]) -> tuple[int, int]:
    queued, refused = queue.requeue(document_ids)
    if queued:
        _wake_ingestion()
    return queued, refused


@transaction.atomic
def document_reprocess(*, document: Document, actor=None) -> Document:
    locked = Document.objects.select_for_update().get(pk=document.pk)
    _, refused = _requeue([locked.pk])
    if refused:
        raise BacklogFull(queue.BACKLOG_FULL)
    locked.refresh_from_db()
    audit_document(locked, actor=actor, action="document.reprocess", after=document_snapshot(locked))
    return locked


@transaction.atomic
def store_reprocess(*, store: RagStore, status: str | None = None, actor=None) -> int:
    """Re-parses, re-chunks and re-embeds the store's documents (those in ``status``, or all).
    Never blocked by quotas."""
    documents = Document.objects.select_for_update().filter(store=store).order_by("id")
    if status:
        documents = documents.filter(status=status)
    ids = list(documents.values_list("id", flat=True))
    queued, refused = _requeue(ids)
    if refused:
        raise BacklogFull(f"{queue.BACKLOG_FULL}; {queued} of {len(ids)} documents were queued", queued=queued)
    for document in Document.objects.filter(pk__in=ids).order_by("id"):
        audit_document(document, actor=actor, action="document.reprocess", after=document_snapshot(document))
    audit_store(store, actor=actor, action="store.reprocess", after={"documents": queued, "status": status or "any"})
    return queued
