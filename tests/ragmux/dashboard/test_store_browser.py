"""A store's page as an editor meets it in a browser: what an upload says about each file, the
checks that refuse a file at upload, the document table at desktop and phone widths, the
ingestion stage of each document, and actions that return to the list where they were sent."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import LAPTOP, PHONE, drop_files, sign_in

pytestmark = pytest.mark.browser


def store_page(page, store) -> None:
    sign_in(page, "editor", PASSWORD)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(f"/admin/stores/{store.pk}/")


def test_an_executable_named_pdf_and_an_empty_file_are_refused_at_upload(wide_page, personas, kb, shots):
    from stores.models import Document

    page = wide_page
    store_page(page, kb)
    drop_files(
        page,
        "[data-dropzone]",
        {
            "setup.pdf": (b"MZ\x90\x00\x03\x00\x00\x00" + b"\x00" * 56, "application/pdf"),
            "blank.txt": (b"", "text/plain"),
            "notes.txt": (b"Field notes from the tide pools.", "text/plain"),
        },
    )
    refused = page.locator("[data-upload-refused] li")
    expect(refused).to_have_count(2)
    expect(refused.filter(has_text="setup.pdf")).to_have_text(
        'setup.pdf: unsupported format — "setup.pdf" does not look like a pdf file (no %PDF header)'
    )
    expect(refused.filter(has_text="blank.txt")).to_have_text('blank.txt: empty — "blank.txt" is empty (0 bytes)')
    expect(page.locator("#documents tbody tr")).to_have_count(1)
    assert list(Document.objects.values_list("filename", flat=True)) == ["notes.txt"]


def test_the_upload_summary_counts_outcomes_and_lists_the_refusals_first(wide_page, personas, kb, shots):
    page = wide_page
    store_page(page, kb)
    files = {f"memo-{n}.txt": (f"Memo number {n} about the budget.".encode(), "text/plain") for n in range(4)}
    files["memo-again.txt"] = files["memo-0.txt"]
    files["run.exe"] = (b"MZ", "application/octet-stream")
    drop_files(page, "[data-dropzone]", files)

    expect(page.locator("[data-upload-progress]")).to_have_text(
        "4 accepted, 1 duplicate, 1 unsupported format (6 files sent)."
    )
    refused = page.locator("[data-upload-refused] li")
    expect(refused).to_have_count(2)
    expect(refused.first).to_be_visible()
    # The accepted files are folded under their count.
    accepted = page.locator("[data-upload-accepted] li")
    expect(accepted).to_have_count(4)
    expect(accepted.first).to_be_hidden()
    page.get_by_text("Accepted files (4)").click()
    expect(accepted.first).to_be_visible()
    shots(page, "store-upload-summary")


LONG_REASON = (
    "the PDF has no text layer (it looks scanned) and OCR is not supported; export it from the "
    "program that made it, or run it through OCR first"
)


def test_the_document_table_fits_a_laptop_and_a_phone_shows_status_reason_and_actions(
    browser, live_server, personas, kb, shots
):
    from tests.factories import DocumentFactory

    for n in range(3):
        DocumentFactory(store=kb, status="ready", filename=f"Quarterly-report-{n}-final-version-approved.pdf")
    failed = DocumentFactory(
        store=kb,
        status="failed",
        error=LONG_REASON,
        error_stage="parse",
        filename="Scanned-contract-between-the-parties-signed-2026.pdf",
        title="Contract between the parties, signed copy",
    )
    context = browser.new_context(base_url=live_server.url, viewport=LAPTOP)
    page = context.new_page()
    store_page(page, kb)
    row = page.locator(f"#document-{failed.pk}")
    delete = row.get_by_role("button", name="Delete")
    expect(delete).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.locator("#documents .table-scroll").evaluate("box => box.scrollWidth <= box.clientWidth")
    assert delete.bounding_box()["x"] + delete.bounding_box()["width"] <= LAPTOP["width"]

    page.set_viewport_size(PHONE)
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.locator("#documents .table-scroll").evaluate("box => box.scrollWidth <= box.clientWidth")
    for shown in (row.locator(".status"), row.locator(".reason"), delete, row.get_by_role("button", name="Reprocess")):
        expect(shown).to_be_visible()
        box = shown.bounding_box()
        assert 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"]
    expect(row.locator(".reason")).to_contain_text("OCR is not supported")
    shots(page, "store-documents")
    context.close()


def test_a_document_being_embedded_shows_the_stage_and_its_progress(wide_page, personas, kb, shots):
    from ingestion.queue import PROGRESS_CHUNKED, PROGRESS_EMBEDDED
    from tests.factories import DocumentFactory

    # Half of its embedding batches done, as the pipeline writes it.
    halfway = PROGRESS_CHUNKED + int((PROGRESS_EMBEDDED - PROGRESS_CHUNKED) * 0.5)
    embedding = DocumentFactory(store=kb, status="processing", filename="handbook.pdf", progress_percent=halfway)
    parsing = DocumentFactory(store=kb, status="processing", filename="memo.docx", progress_percent=0)
    page = wide_page
    store_page(page, kb)
    expect(page.locator(f"#document-{embedding.pk} .stage")).to_have_text("embedding 50 %")
    expect(page.locator(f"#document-{parsing.pk} .stage")).to_have_text("parsing")
    shots(page, "store-embedding")


def test_actions_return_to_the_filter_and_the_page_they_were_sent_from(wide_page, personas, kb):
    from tests.factories import DocumentFactory

    for n in range(3):
        DocumentFactory(store=kb, status="failed", error="boom", error_stage="embed", filename=f"failed-{n}.txt")
    for n in range(120):
        DocumentFactory(store=kb, status="ready", filename=f"doc-{n:03}.txt")
    page = wide_page
    store_page(page, kb)
    page.get_by_role("navigation", name="Filter by status").get_by_role("link", name="failed").click()
    expect(page).to_have_url(re.compile(rf"/admin/stores/{kb.pk}/\?status=failed$"))
    page.get_by_role("button", name="Retry all failed (3)").click()
    expect(page.get_by_role("status")).to_contain_text("3 failed documents queued for reprocessing.")
    expect(page).to_have_url(re.compile(rf"/admin/stores/{kb.pk}/\?status=failed$"))

    page.goto(f"/admin/stores/{kb.pk}/?page=3")
    row = page.locator("#documents tbody tr").first
    name = row.locator("th").inner_text()
    page.on("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Reprocess").click()
    expect(page.get_by_role("status")).to_contain_text(f"{name}: queued for reprocessing.")
    expect(page).to_have_url(re.compile(rf"/admin/stores/{kb.pk}/\?page=3$"))
    expect(page.get_by_role("navigation", name="Pages")).to_contain_text("Page 3 of 3")
