"""The ingestion queue is the `documents` table itself, and this module is the only writer of
a document's status: admission, claim, progress, ready, fail, requeue and reprocess are each one
conditional UPDATE here.

The table is a leased queue (ragmux.core.work_queue: the claim, its lease and fencing token
``lease_token``, renewal, release and the sweep of expired leases). A worker claims the oldest
pending document with ``FOR UPDATE SKIP LOCKED``, with more small ones of its store, and gives up
on a document after ``INGEST_MAX_ATTEMPTS`` claims. A reprocess moves the token on too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from ragmux.core import metrics
from ragmux.core.work_queue import LeasedQueue
from stores.models import Document, DocumentStatus, ErrorStage

# Small documents are claimed together so they share embedding batches (and round trips).
SMALL_DOCUMENT_BYTES = 64 * 1024
MAX_DOCUMENTS_PER_CLAIM = 32
BACKLOG_FULL = "the ingestion backlog is full (MAX_PENDING_DOCUMENTS), retry later"
# Progress marks: a document past one has finished that stage (see ingestion.pipeline).
PROGRESS_PARSED = 10
PROGRESS_CHUNKED = 20
PROGRESS_EMBEDDED = 99
# The stages of a processing document, each with the mark that ends it; only embedding takes
# long enough (and is written often enough, a batch at a time) to show how far it got.
STAGES = (("parsing", PROGRESS_PARSED), ("chunking", PROGRESS_CHUNKED), ("embedding", PROGRESS_EMBEDDED))
INDEXING = "indexing"

DOCUMENTS = LeasedQueue(
    table=Document._meta.db_table,
    owner_column="lease_owner",
    token_column="lease_token",
    queued=DocumentStatus.PENDING,
    running=DocumentStatus.PROCESSING,
    failed=DocumentStatus.FAILED,
    lease_setting="INGEST_LEASE",
    max_attempts_setting="INGEST_MAX_ATTEMPTS",
    worker_doing="processing",
)


@dataclass(frozen=True)
class Claim:
    document_id: int
    store_id: int
    token: int
    attempts: int


def parse_progress(pages_read: int, pages_to_read: int) -> int:
    """The progress mark of a parse whose OCR has read this many of its pages (rounded down)."""
    return PROGRESS_PARSED * pages_read // max(pages_to_read, 1)


def stage_of(progress_percent: int) -> str:
    """The stage a processing document is in, in words: "parsing", "parsing 30 %" (the pages OCR
    has read), "embedding 40 %"."""
    start = 0
    for name, end in STAGES:
        if progress_percent < end:
            if name == "chunking" or (name == "parsing" and progress_percent == start):
                return name
            # Rounded up: the pipeline rounds its marks down, so a half of the batches reads 50 %.
            return f"{name} {math.ceil((progress_percent - start) * 100 / (end - start))} %"
        start = end
    return INDEXING


def claim_documents(*, owner: str, max_documents: int = MAX_DOCUMENTS_PER_CLAIM) -> list[Claim]:
    """Claims the oldest pending document and, when it is small, more small ones of its store."""
    try:
        claims = _claim(owner=owner, max_documents=max_documents)
    except Exception:
        metrics.increment(metrics.INGEST_CLAIMS, outcome="error")
        raise
    metrics.increment(metrics.INGEST_CLAIMS, outcome="claimed" if claims else "empty")
    return claims


def _claim(*, owner: str, max_documents: int) -> list[Claim]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, store_id, size_bytes FROM documents WHERE status = %s "
            "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
            [DocumentStatus.PENDING],
        )
        first = cursor.fetchone()
        if first is None:
            return []
        ids = [first[0]]
        if first[2] <= SMALL_DOCUMENT_BYTES and max_documents > 1:
            cursor.execute(
                "SELECT id FROM documents WHERE status = %s AND store_id = %s AND size_bytes <= %s AND id <> %s "
                "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                [DocumentStatus.PENDING, first[1], SMALL_DOCUMENT_BYTES, first[0], max_documents - 1],
            )
            ids.extend(row[0] for row in cursor.fetchall())
        claimed = DOCUMENTS.claim(ids, owner=owner)
    claims = (Claim(row_id, first[1], token, attempts) for row_id, token, attempts in claimed)
    return sorted(claims, key=lambda claim: claim.document_id)


def _held(claims: list[Claim]) -> list[tuple[int, int]]:
    return [(claim.document_id, claim.token) for claim in claims]


def renew(claims: list[Claim]) -> set[int]:
    """Extends the leases still held; returns the ids of the documents still held."""
    return DOCUMENTS.renew(_held(claims))


def hold(claim: Claim) -> bool:
    """Locks the claimed row for the rest of the transaction if the claim is still ours."""
    return DOCUMENTS.holds(claim.document_id, claim.token)


def record_progress(claim: Claim, **fields) -> bool:
    """Updates progress fields of a held claim; False when the claim was lost."""
    held = Document.objects.filter(pk=claim.document_id, **DOCUMENTS.held_filter(claim.token))
    return held.update(**fields, updated_at=Now()) == 1


def fail(claim: Claim, reason: str, *, stage: ErrorStage) -> bool:
    """Marks a held document failed at ``stage`` (its progress stays where it got to)."""
    return record_progress(claim, status=DocumentStatus.FAILED, error=reason, error_stage=stage, **DOCUMENTS.ended())


def mark_ready(claim: Claim, *, chunk_count: int, page_count: int | None) -> bool:
    """Ends a held claim as ready; the caller has written the document's index rows."""
    return record_progress(
        claim,
        status=DocumentStatus.READY,
        progress_percent=100,
        error="",
        error_stage="",
        chunk_count=chunk_count,
        page_count=page_count,
        **DOCUMENTS.ended(),
    )


def pending_count() -> int:
    return Document.objects.filter(status=DocumentStatus.PENDING).count()


def admission_status() -> dict:
    """The state a newly stored document starts in: queued, or failed at upload when the
    backlog is full (kept, so the editor can retry it later)."""
    if pending_count() >= settings.MAX_PENDING_DOCUMENTS:
        return {"status": DocumentStatus.FAILED, "error": BACKLOG_FULL, "error_stage": ErrorStage.UPLOAD}
    return {"status": DocumentStatus.PENDING, "error": "", "error_stage": ""}


def requeue(document_ids: list[int]) -> tuple[int, int]:
    """Puts documents back in the queue from any state; past the backlog limit they are failed
    at upload instead. The fencing token moves on, so a worker still holding an old claim
    writes nothing. Returns (queued, refused)."""
    room = max(0, settings.MAX_PENDING_DOCUMENTS - pending_count())
    reset = {
        "progress_percent": 0,
        "attempts": 0,
        "lease_owner": "",
        "lease_expires_at": None,
        "lease_token": F("lease_token") + 1,
    }
    queued, refused = document_ids[:room], document_ids[room:]
    Document.objects.filter(pk__in=queued).update(status=DocumentStatus.PENDING, error="", error_stage="", **reset)
    Document.objects.filter(pk__in=refused).update(
        status=DocumentStatus.FAILED, error=BACKLOG_FULL, error_stage=ErrorStage.UPLOAD, **reset
    )
    return len(queued), len(refused)


def release(claims: list[Claim]) -> int:
    """Puts held claims back in the queue as if they had never been made (a graceful stop is not
    a failed attempt); returns how many were still held."""
    released = len(DOCUMENTS.release(_held(claims)))
    metrics.increment(metrics.INGEST_JOBS, released, outcome="released")
    return released


def requeue_expired() -> tuple[int, int]:
    """Returns claims whose lease ran out to the queue, or fails them after too many attempts.

    Returns (requeued, given_up).
    """
    # The stage a document given up on failed at: the one its progress had not passed.
    swept = DOCUMENTS.requeue_expired(
        also="""
            , error_stage = CASE WHEN attempts < %(max)s THEN ''
                                 WHEN progress_percent < %(parsed)s THEN 'parse'
                                 WHEN progress_percent < %(chunked)s THEN 'chunk'
                                 WHEN progress_percent < %(embedded)s THEN 'embed'
                                 ELSE 'index' END""",
        params={"parsed": PROGRESS_PARSED, "chunked": PROGRESS_CHUNKED, "embedded": PROGRESS_EMBEDDED},
    )
    statuses = [status for _, status in swept]
    requeued, given_up = statuses.count(DocumentStatus.PENDING), statuses.count(DocumentStatus.FAILED)
    for outcome, count in (("requeued", requeued), ("failed", given_up)):
        if count:
            metrics.increment(metrics.INGEST_LEASES_EXPIRED, count, outcome=outcome)
    return requeued, given_up


def pending_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM documents WHERE status = %s)", [DocumentStatus.PENDING])
        return cursor.fetchone()[0]
