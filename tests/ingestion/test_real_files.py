"""Real files no one here wrote, ingested end to end (upload → parse → chunk → embed → store)."""

from pathlib import Path

import pytest

from ingestion.services import IncomingFile, document_upload
from stores.models import Chunk, Document
from stores.services import store_create

FILES = Path(__file__).parent / "files"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ingested(fake_connection, ingest_now):
    store = store_create(name="real", values={"embedding_connection_id": fake_connection.id, "chunk_overlap": 0})
    names = ["python-docx-test.docx", "tide-pools.pdf", "field-station.html", "field-notes.md"]
    result = document_upload(
        store=store, files=[IncomingFile(filename=n, data=(FILES / n).read_bytes()) for n in names]
    )
    assert result.refusal is None
    ingest_now()
    return {d.filename: d for d in Document.objects.filter(store=store)}


def sections(document):
    return [(c.section, c.page) for c in Chunk.objects.filter(document=document).order_by("index")]


def test_every_real_file_ends_ready(ingested):
    assert {name: (d.status, d.error, d.progress_percent) for name, d in ingested.items()} == {
        name: ("ready", "", 100) for name in ingested
    }


def test_a_word_document_from_python_docx_keeps_its_heading_as_the_section(ingested):
    document = ingested["python-docx-test.docx"]
    assert sections(document) == [("python-docx was here!", None)]
    assert Chunk.objects.get(document=document).content == "python-docx was here too!"
    assert document.page_count is None


def test_a_pdf_typeset_by_groff_keeps_its_pages(ingested):
    document = ingested["tide-pools.pdf"]
    assert document.page_count == 3
    assert [page for _, page in sections(document)] == [1, 2, 3]  # never one chunk across two pages
    assert "tide" in Chunk.objects.filter(document=document, page=1).get().content.lower()


def test_html_drops_navigation_and_scripts_and_keeps_h1_to_h3_sections(ingested):
    document = ingested["field-station.html"]
    assert [section for section, _ in sections(document)] == [
        "Visiting the station",
        "Visiting the station > Getting there",
        "Getting there > By bicycle",
        "Visiting the station > Tide table",
        "Tide table > Reading the table",
    ]
    text = " ".join(Chunk.objects.filter(document=document).values_list("content", flat=True))
    html = (FILES / "field-station.html").read_text()
    assert "<nav" in html and "<script" in html
    for dropped in ("analytics", "Log in", "About", "map pin", "font-family"):
        assert dropped in html
        assert dropped not in text


def test_markdown_sections_are_the_last_two_heading_levels(ingested):
    assert [section for section, _ in sections(ingested["field-notes.md"])] == [
        "Field notes",
        "Field notes > Equipment",
        "Equipment > Calibration",
        "Field notes > Observations",
        "Observations > Weather",
    ]
