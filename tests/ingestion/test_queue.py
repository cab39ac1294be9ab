"""The document state machine: every transition is a conditional UPDATE on the claim's token."""

from __future__ import annotations

import pytest
from django.db.models import F

from ingestion import queue
from stores.models import Document, DocumentStatus, ErrorStage
from tests.factories import DocumentFactory, StoreFactory
from tests.helpers import counted

pytestmark = pytest.mark.django_db(transaction=True)


def claimed() -> queue.Claim:
    DocumentFactory(store=StoreFactory())
    (claim,) = queue.claim_documents(owner="test")
    return claim


def test_claims_are_counted_by_outcome():
    before = {outcome: counted("ragmux_ingest_claims_total", outcome=outcome) for outcome in ("claimed", "empty")}
    claimed()
    assert queue.claim_documents(owner="test") == []
    after = {outcome: counted("ragmux_ingest_claims_total", outcome=outcome) for outcome in ("claimed", "empty")}
    assert after == {outcome: count + 1 for outcome, count in before.items()}


def test_claims_given_back_at_a_graceful_stop_are_counted():
    before = counted("ragmux_ingest_jobs_total", outcome="released")
    assert queue.release([claimed()]) == 1
    assert counted("ragmux_ingest_jobs_total", outcome="released") == before + 1


def test_a_failure_records_its_stage_and_reason():
    claim = claimed()

    assert queue.fail(claim, "the PDF is encrypted", stage=ErrorStage.PARSE)

    document = Document.objects.get(pk=claim.document_id)
    assert (document.status, document.error, document.error_stage) == ("failed", "the PDF is encrypted", "parse")
    assert document.lease_owner == ""


def test_a_lost_claim_writes_nothing():
    claim = claimed()
    Document.objects.filter(pk=claim.document_id).update(lease_token=F("lease_token") + 1)

    assert not queue.mark_ready(claim, chunk_count=3, page_count=None)
    assert not queue.fail(claim, "late", stage=ErrorStage.EMBED)
    assert Document.objects.get(pk=claim.document_id).status == DocumentStatus.PROCESSING


def test_ready_clears_an_earlier_failure():
    claim = claimed()
    Document.objects.filter(pk=claim.document_id).update(error="old", error_stage=ErrorStage.EMBED)

    assert queue.mark_ready(claim, chunk_count=3, page_count=2)

    document = Document.objects.get(pk=claim.document_id)
    assert (document.status, document.error, document.error_stage, document.chunk_count, document.page_count) == (
        "ready",
        "",
        "",
        3,
        2,
    )


@pytest.mark.parametrize(
    ("progress", "stage"),
    [
        (0, "parse"),
        (queue.PROGRESS_PARSED, "chunk"),
        (queue.PROGRESS_CHUNKED, "embed"),
        (queue.PROGRESS_EMBEDDED, "index"),
    ],
)
def test_giving_up_on_expired_leases_names_the_stage_it_stopped_in(settings, progress, stage):
    settings.INGEST_MAX_ATTEMPTS = 1
    claim = claimed()
    Document.objects.filter(pk=claim.document_id).update(
        progress_percent=progress, lease_expires_at="2000-01-01T00:00:00Z"
    )
    given_up_before = counted("ragmux_ingest_leases_expired_total", outcome="failed")

    assert queue.requeue_expired() == (0, 1)
    assert counted("ragmux_ingest_leases_expired_total", outcome="failed") == given_up_before + 1

    document = Document.objects.get(pk=claim.document_id)
    assert (document.status, document.error_stage) == ("failed", stage)
    assert document.error.startswith("gave up after 1 attempts")


def test_requeue_past_the_backlog_fails_the_rest_at_upload(settings):
    store = StoreFactory()
    first, second = DocumentFactory(store=store, status="ready"), DocumentFactory(store=store, status="ready")
    settings.MAX_PENDING_DOCUMENTS = 1

    assert queue.requeue([first.pk, second.pk]) == (1, 1)

    statuses = dict(Document.objects.values_list("pk", "status"))
    assert statuses == {first.pk: "pending", second.pk: "failed"}
    assert Document.objects.get(pk=second.pk).error_stage == ErrorStage.UPLOAD
