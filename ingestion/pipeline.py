"""One ingestion job: parse, chunk, embed and store the documents of one claim.

Documents of a claim belong to one store, so their chunk texts share embedding batches: a
small document does not pay a round trip of its own. Identical texts are embedded once, and a
text the store already holds a vector for (same model) reuses that vector. Each document is
then written in its own fenced transaction: only while its claim still holds.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from gateway.connections.models import ModelConnection
from gateway.connections.providers.embeddings import EmbeddingProvider, embedding_provider
from ingestion import queue
from ingestion.chunking import ChunkDraft, chunk_blocks, embedded_text, text_hash
from ingestion.embedding import EmbeddingFailed, embed_with_retries
from ingestion.parsing import OcrOptions, ParseError, parse_document
from ingestion.queue import PROGRESS_CHUNKED, PROGRESS_EMBEDDED, PROGRESS_PARSED, parse_progress
from ragmux.core import metrics
from ragmux.core.work_queue import stop_requested
from stores import index
from stores.models import Document, ErrorStage, RagStore
from stores.vector_tables import WidthNotSupported, check_width, ensure_embedding_table, table_name

logger = logging.getLogger("ragmux.ingestion")


def model_key(connection_: ModelConnection) -> str:
    """What a stored vector was made by; a vector is reused only under the same key."""
    return f"{connection_.provider_type}:{connection_.model_name}:{connection_.dimensions or ''}"


class LeaseKeeper:
    """Renews the job's leases every third of the lease in a thread of its own, and notes the
    documents whose claim was lost (deleted, reprocessed, or expired) so work on them stops."""

    def __init__(self, claims: list[queue.Claim]):
        self.claims = claims
        self.lost: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(settings.INGEST_LEASE / 3):
                active = [c for c in self.claims if c.document_id not in self.lost]
                held = queue.renew(active)
                lost = {c.document_id for c in active if c.document_id not in held}
                if lost:
                    metrics.increment(metrics.INGEST_LEASES_LOST, len(lost))
                    self.lost.update(lost)
        finally:
            connection.close()

    def holds(self, claim: queue.Claim) -> bool:
        return claim.document_id not in self.lost and not stop_requested.is_set()


@dataclass
class PreparedDocument:
    claim: queue.Claim
    filename: str
    page_count: int | None
    drafts: list[ChunkDraft]
    hashes: list[str]
    texts: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    embed_tokens: int = 0
    batches_total: int = 0
    batches_done: int = 0
    failed: bool = False


def _fail(document: PreparedDocument | queue.Claim, reason: str, stage: ErrorStage) -> None:
    claim = document.claim if isinstance(document, PreparedDocument) else document
    if isinstance(document, PreparedDocument):
        document.failed = True
    held = queue.fail(claim, reason, stage=stage)
    metrics.increment(metrics.INGEST_JOBS, outcome="failed" if held else "lease_lost")
    fields = {"document_id": claim.document_id, "stage": stage, "reason": reason}
    logger.info("document failed document_id=%(document_id)s stage=%(stage)s reason=%(reason)r", fields, extra=fields)


def _unexpected(exc: Exception) -> str:
    # The message names the exception so an operator can find it in the worker's log.
    return f"unexpected error: {exc.__class__.__name__}: {exc}"


def _ocr_options(store: RagStore) -> OcrOptions | None:
    if not store.ocr:
        return None
    return OcrOptions(
        language=store.ocr_language,
        max_pages=settings.OCR_MAX_PAGES,
        page_timeout=settings.OCR_PAGE_TIMEOUT,
        max_pixels=settings.OCR_MAX_PIXELS,
    )


def _parsed(claim: queue.Claim, store: RagStore, row: dict):
    """The document's parse; None when it failed (the document too)."""
    try:
        parsed = parse_document(
            filename=row["filename"],
            data=bytes(row["original"]),
            pdf_timeout=settings.PDF_PARSE_TIMEOUT,
            ocr=_ocr_options(store),
            on_progress=lambda done, total: queue.record_progress(claim, progress_percent=parse_progress(done, total)),
        )
    except ParseError as exc:
        _fail(claim, str(exc), ErrorStage.PARSE)
        return None
    except Exception as exc:
        logger.exception("parser failed document_id=%s", claim.document_id)
        _fail(claim, _unexpected(exc), ErrorStage.PARSE)
        return None
    return parsed


def _chunked(claim: queue.Claim, store: RagStore, parsed) -> list[ChunkDraft] | None:
    """The parse's chunks; None when chunking failed or made none, or too many (the document
    failed too)."""
    try:
        drafts = chunk_blocks(
            parsed.blocks,
            strategy=store.chunking_strategy,
            chunk_size=store.chunk_size,
            chunk_overlap=store.chunk_overlap,
        )
    except Exception as exc:
        logger.exception("chunker failed document_id=%s", claim.document_id)
        _fail(claim, _unexpected(exc), ErrorStage.CHUNK)
        return None
    if not drafts:
        _fail(claim, "the document contains no text", ErrorStage.CHUNK)
        return None
    if len(drafts) > settings.MAX_CHUNKS_PER_DOCUMENT:
        _fail(
            claim,
            f"the document splits into {len(drafts)} chunks, more than MAX_CHUNKS_PER_DOCUMENT "
            f"({settings.MAX_CHUNKS_PER_DOCUMENT}); raise the store's chunk_size or the limit",
            ErrorStage.CHUNK,
        )
        return None
    return drafts


def _prepare(claim: queue.Claim, store: RagStore) -> PreparedDocument | None:
    row = Document.objects.filter(pk=claim.document_id).values("filename", "original").first()
    if row is None:
        return None
    started = time.monotonic()
    parsed = _parsed(claim, store, row)
    if parsed is None:
        return None
    parsed_at = time.monotonic()
    queue.record_progress(
        claim,
        progress_percent=PROGRESS_PARSED,
        page_count=parsed.page_count,
        warnings=list(parsed.warnings),
        ocr_pages=parsed.ocr_pages,
    )
    drafts = _chunked(claim, store, parsed)
    if drafts is None:
        return None
    texts = [
        embedded_text(
            filename=row["filename"], section=d.section, content=d.content, contextual=store.contextual_chunks
        )
        for d in drafts
    ]
    queue.record_progress(claim, progress_percent=PROGRESS_CHUNKED)
    chunked_at = time.monotonic()
    return PreparedDocument(
        claim=claim,
        filename=row["filename"],
        page_count=parsed.page_count,
        drafts=drafts,
        hashes=[text_hash(t) for t in texts],
        texts=texts,
        timings={"parse": parsed_at - started, "chunk": chunked_at - parsed_at},
    )


def _stored_vectors(store: RagStore, key: str, hashes: set[str]) -> dict[str, str]:
    """Vectors this store already holds for these texts, made by the same model."""
    if store.dimensions is None or not hashes:
        return {}
    name = table_name(store.dimensions)
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        if not cursor.fetchone()[0]:
            return {}
        cursor.execute(
            f"SELECT DISTINCT ON (embedded_hash) embedded_hash, embedding::text FROM {name} "
            "WHERE store_id = %s AND model_key = %s AND embedded_hash = ANY(%s)",
            [store.pk, key, list(hashes)],
        )
        return {row[0]: row[1] for row in cursor.fetchall()}


class Job:
    def __init__(self, store: RagStore, documents: list[PreparedDocument], keeper: LeaseKeeper, deadline: float):
        self.store = store
        self.documents = documents
        self.keeper = keeper
        self.deadline = deadline
        self.key = model_key(store.embedding_connection)
        self.vectors: dict[str, str] = {}
        self.reused = 0

    def alive(self) -> list[PreparedDocument]:
        return [d for d in self.documents if not d.failed and self.keeper.holds(d.claim)]

    def run(self) -> None:
        started = time.monotonic()
        wanted = {h for d in self.documents for h in d.hashes}
        self.vectors = _stored_vectors(self.store, self.key, wanted)
        self.reused = len(self.vectors)
        missing: dict[str, str] = {}
        owners: dict[str, list[PreparedDocument]] = {}
        for document in self.documents:
            for digest, text in zip(document.hashes, document.texts, strict=True):
                if digest not in self.vectors:
                    missing.setdefault(digest, text)
                    owners.setdefault(digest, []).append(document)
        try:
            provider = embedding_provider(self.store.embedding_connection)
        except Exception as exc:  # noqa: BLE001 - any construction failure fails the documents
            for document in self.documents:
                _fail(
                    document,
                    f"cannot embed with connection {self.store.embedding_connection.name!r}: {exc}",
                    ErrorStage.EMBED,
                )
            return
        batches = _batches(list(missing), provider.max_batch)
        for batch in batches:
            for document in {id(d): d for h in batch for d in owners[h]}.values():
                document.batches_total += 1
        for batch in batches:
            if not self._embed_batch(provider, batch, missing, owners):
                return
        embed_seconds = time.monotonic() - started
        if self.store.dimensions is None:
            return
        ensure_embedding_table(self.store.dimensions)
        for document in self.alive():
            document.timings["embed"] = embed_seconds
            _commit(self.store, self.key, document, self.vectors)

    def _embed_batch(self, provider: EmbeddingProvider, batch: list[str], missing, owners) -> bool:
        documents = {id(d): d for h in batch for d in owners[h]}.values()
        if not any(not d.failed and self.keeper.holds(d.claim) for d in documents):
            return bool(self.alive())
        if time.monotonic() > self.deadline:
            for document in self.alive():
                _fail(document, _too_long(), ErrorStage.EMBED)
            return False
        texts = [missing[h] for h in batch]
        try:
            result = embed_with_retries(provider, texts, deadline=self.deadline)
        except EmbeddingFailed as exc:
            for document in documents:
                if not document.failed:
                    _fail(document, str(exc), ErrorStage.EMBED)
            return bool(self.alive())
        if not self._accept_width(result.dimensions):
            return False
        metrics.increment(
            metrics.INGEST_EMBED_TOKENS,
            result.tokens,
            source="reported" if result.tokens_reported else "estimated",
        )
        total_chars = sum(len(t) for t in texts) or 1
        for digest, text, vector in zip(batch, texts, result.vectors, strict=True):
            self.vectors[digest] = index.format_vector(vector)
            for document in owners[digest]:
                document.embed_tokens += round(result.tokens * len(text) / total_chars / len(owners[digest]))
        for document in documents:
            document.batches_done += 1
            if not document.failed:
                share = document.batches_done / document.batches_total
                queue.record_progress(
                    document.claim,
                    progress_percent=PROGRESS_CHUNKED + int((PROGRESS_EMBEDDED - PROGRESS_CHUNKED) * share),
                )
        return True

    def _accept_width(self, width: int) -> bool:
        store = self.store
        if store.dimensions is None:
            try:
                check_width(width)
            except WidthNotSupported as exc:
                for document in self.alive():
                    _fail(document, str(exc), ErrorStage.EMBED)
                return False
            RagStore.objects.filter(pk=store.pk, dimensions__isnull=True).update(dimensions=width)
            store.dimensions = RagStore.objects.filter(pk=store.pk).values_list("dimensions", flat=True).first()
            if store.dimensions is None:
                logger.debug("store %s was deleted while its documents were embedded", store.pk)
                return False
        if store.dimensions != width:
            for document in self.alive():
                _fail(
                    document,
                    f"the embedding model returned {width} dimensions but this store holds "
                    f"{store.dimensions}-dimensional vectors",
                    ErrorStage.EMBED,
                )
            return False
        return True


def _too_long() -> str:
    return f"ingestion took longer than {settings.INGEST_JOB_TIMEOUT:g}s (INGEST_JOB_TIMEOUT)"


def _batches(items: list[str], size: int) -> list[list[str]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def _commit(store: RagStore, key: str, document: PreparedDocument, vectors: dict[str, str]) -> None:
    started = time.monotonic()
    claim = document.claim
    drafts = document.drafts
    rows = [
        index.ChunkRow(
            document_id=claim.document_id,
            index=d.index,
            content=d.content,
            section=d.section,
            page=d.page,
            embedded_hash=digest,
        )
        for d, digest in zip(drafts, document.hashes, strict=True)
    ]
    try:
        with transaction.atomic():
            index.lock_store_for_writing(store.pk)
            if not queue.hold(claim):
                metrics.increment(metrics.INGEST_JOBS, outcome="lease_lost")
                return
            index.replace_document(
                store_id=store.pk,
                dimensions=store.dimensions,
                model_key=key,
                document_id=claim.document_id,
                rows=rows,
                vectors=[vectors[h] for h in document.hashes],
            )
            queue.mark_ready(claim, chunk_count=len(drafts), page_count=document.page_count)
    except DatabaseError as exc:
        if not Document.objects.filter(pk=claim.document_id).exists():
            # Deleted (alone or with its store) while it was being written: nothing to report.
            logger.debug("document %s was deleted while it was indexed", claim.document_id)
            return
        logger.exception("index write failed document_id=%s", claim.document_id)
        _fail(document, _unexpected(exc), ErrorStage.INDEX)
        return
    metrics.increment(metrics.INGEST_JOBS, outcome="ready")
    document.timings["commit"] = time.monotonic() - started
    _report_ingested(store, document)


def _report_ingested(store: RagStore, document: PreparedDocument) -> None:
    """A ready document's stage timings, as metrics and as its log line."""
    for stage, seconds in document.timings.items():
        metrics.observe(metrics.INGEST_STAGE_SECONDS, seconds, stage=stage)
    fields = {
        "document_id": document.claim.document_id,
        "store_id": store.pk,
        "chunks": len(document.drafts),
        "embed_tokens": document.embed_tokens,
        "pages": document.page_count,
        **{f"{stage}_ms": round(seconds * 1000) for stage, seconds in document.timings.items()},
    }
    # The fields are the line's text (name=value) and, in JSON logs, fields of their own.
    logger.info("document ingested " + " ".join(f"{name}=%({name})s" for name in fields), fields, extra=fields)


def run_job(claims: list[queue.Claim]) -> None:
    """Processes the documents of one claim (all of one store) to `ready` or `failed`."""
    if not claims:
        return
    deadline = time.monotonic() + settings.INGEST_JOB_TIMEOUT
    with LeaseKeeper(claims) as keeper:
        store = RagStore.objects.select_related("embedding_connection").filter(pk=claims[0].store_id).first()
        if store is None:
            return
        prepared = []
        for claim in claims:
            if not keeper.holds(claim):
                continue
            if time.monotonic() > deadline:
                _fail(claim, _too_long(), ErrorStage.PARSE)
                continue
            document = _prepare(claim, store)
            if document is not None:
                prepared.append(document)
        if prepared:
            Job(store, prepared, keeper, deadline).run()
