"""A scanned document, read by OCR at ingestion, is found by `/v1/retrieve` on the right page."""

from __future__ import annotations

from ingestion.services import IncomingFile, document_upload
from stores.models import Document
from tests.ingestion.files.make_documents import scanned_pdf_of

SCANNED_PAGES = [
    ["Minutes of the harbour committee, spring meeting."],
    ["The committee approved new mooring fees for visiting yachts."],
    ["Dredging of the inner basin begins after the regatta in September."],
    ["The next meeting is in the autumn."],
]


def test_a_phrase_from_page_three_of_a_scan_finds_page_three(v1, project_key, falcon_store, ingest_now):
    upload = document_upload(
        store=falcon_store, files=[IncomingFile("committee-minutes.pdf", scanned_pdf_of(SCANNED_PAGES))]
    )
    assert upload.refusal is None
    ingest_now()
    document = Document.objects.get(filename="committee-minutes.pdf")
    assert (document.status, document.page_count, document.ocr_pages, document.warnings) == ("ready", 4, 4, [])

    response = v1(project_key).post("/retrieve", json={"query": "dredging of the inner basin", "top_k": 3})

    assert response.status_code == 200, response.text
    top = response.json()["data"][0]
    assert (top["filename"], top["page"]) == ("committee-minutes.pdf", 3)
    assert "regatta in september" in top["content"].lower()
