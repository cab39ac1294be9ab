"""Admission services, called directly with factory-built stores (the HTTP contract is in
tests/stores/test_document_api.py)."""

from __future__ import annotations

import pytest

from ingestion import services
from ingestion.parsing.types import MAX_EXTRACTED_TEXT
from ingestion.queue import BACKLOG_FULL
from stores.models import Document, DocumentStatus, ErrorStage
from tests.factories import DocumentFactory, StoreFactory

pytestmark = pytest.mark.django_db(transaction=True)


def text_file(name: str, body: str | bytes) -> services.IncomingFile:
    return services.IncomingFile(filename=name, data=body if isinstance(body, bytes) else body.encode())


def test_a_duplicate_in_a_batch_is_skipped_and_the_rest_are_stored():
    store = StoreFactory()
    existing = DocumentFactory(store=store, original=b"already here")

    result = services.document_upload(
        store=store,
        files=[text_file("a.txt", "first"), text_file("same.txt", b"already here"), text_file("b.md", "# second")],
    )

    assert result.refusal is None
    assert [d.filename for d in result.documents] == ["a.txt", "b.md"]
    assert [(s.filename, s.code, s.existing_document_id) for s in result.skipped] == [
        ("same.txt", "duplicate_document", existing.pk)
    ]
    assert Document.objects.filter(store=store).count() == 3


def test_an_unsupported_file_is_skipped_with_its_name():
    store = StoreFactory()

    result = services.document_upload(store=store, files=[text_file("a.txt", "kept"), text_file("x.exe", "MZ")])

    assert [d.filename for d in result.documents] == ["a.txt"]
    assert result.skipped[0].code == "unsupported_format"
    assert "x.exe" in result.skipped[0].message


def test_every_file_a_duplicate_is_a_conflict_listing_them():
    store = StoreFactory()
    DocumentFactory(store=store, original=b"one")

    result = services.document_upload(store=store, files=[text_file("again.txt", b"one")])

    assert isinstance(result.refusal, services.AllDuplicates)
    assert result.documents == []
    assert result.skipped[0].filename == "again.txt"


def test_a_text_file_larger_than_the_extracted_text_cap_is_never_stored():
    store = StoreFactory()

    result = services.document_upload(store=store, files=[text_file("big.txt", b"a" * (MAX_EXTRACTED_TEXT + 1))])

    assert isinstance(result.refusal, services.AllTooLarge)
    assert result.refusal.code == "text_too_large"
    assert not Document.objects.filter(store=store).exists()


def test_mixed_reasons_for_skipping_everything_are_a_plain_refusal():
    store = StoreFactory()
    DocumentFactory(store=store, original=b"one")

    result = services.document_upload(store=store, files=[text_file("again.txt", b"one"), text_file("x.exe", "MZ")])

    assert isinstance(result.refusal, services.AllRefused)
    assert result.refusal.code == "nothing_stored"
    assert len(result.skipped) == 2


def test_a_full_quota_stops_the_request_and_keeps_what_was_stored():
    store = StoreFactory(max_documents=1)

    result = services.document_upload(store=store, files=[text_file("a.txt", "one"), text_file("b.txt", "two")])

    assert isinstance(result.refusal, services.QuotaExceeded)
    assert result.refusal.extra == {"filename": "b.txt"}
    assert [d.filename for d in result.documents] == ["a.txt"]


def test_a_full_backlog_keeps_documents_failed_at_upload(settings):
    settings.MAX_PENDING_DOCUMENTS = 0
    store = StoreFactory()

    result = services.document_upload(store=store, files=[text_file("a.txt", "one")])

    assert isinstance(result.refusal, services.BacklogFull)
    document = Document.objects.get(store=store)
    assert (document.status, document.error, document.error_stage) == (
        DocumentStatus.FAILED,
        BACKLOG_FULL,
        ErrorStage.UPLOAD,
    )


def test_reprocess_by_status_requeues_only_those_documents():
    store = StoreFactory()
    failed = DocumentFactory(store=store, status=DocumentStatus.FAILED, error="x", error_stage=ErrorStage.PARSE)
    ready = DocumentFactory(store=store, status=DocumentStatus.READY)

    queued = services.store_reprocess(store=store, status=DocumentStatus.FAILED)

    assert queued == 1
    failed.refresh_from_db()
    ready.refresh_from_db()
    assert (failed.status, failed.error, failed.error_stage) == (DocumentStatus.PENDING, "", "")
    assert ready.status == DocumentStatus.READY


def test_text_ingest_names_the_document_after_its_title():
    store = StoreFactory()

    result = services.document_ingest_text(store=store, title="Notes / 2026", content="hello", source="s", tags=["t"])

    document = result.documents[0]
    assert (document.filename, document.title, document.source, document.tags) == (
        "Notes 2026.txt",
        "Notes / 2026",
        "s",
        ["t"],
    )
