"""Slides, spreadsheets, e-books and e-mail, with the quirks real files have."""

import pytest

from ingestion.parsing import Block, ParseError, parse_document, sheets
from tests.ingestion.files.make_documents import (
    book_epub,
    encrypted_xlsx,
    nested_eml,
    slides_pptx,
    workbook_xlsx,
)


def parse(filename: str, data: bytes):
    return parse_document(filename=filename, data=data, pdf_timeout=30)


def test_a_slide_is_a_section_titled_by_its_title_with_its_table_and_notes_on_its_page():
    document = parse("deck.pptx", slides_pptx())

    assert (document.title, document.page_count) == ("Quarterly budget", 2)
    assert document.blocks == [
        Block("Spending rose in the north", "Quarterly budget", 1),
        Block("The south held steady", "Quarterly budget", 1),
        Block("Region | Total", "Quarterly budget", 1),
        Block("North | 12", "Quarterly budget", 1),
        Block("Notes: Mention the new depot before the numbers.", "Quarterly budget", 1),
        # An untitled slide is named by its number; text inside a group of shapes is read.
        Block("Questions welcome", "Slide 2", 2),
    ]


def test_every_row_of_a_sheet_names_its_columns_a_merged_header_names_all_it_spans_and_hidden_sheets_are_left_out():
    document = parse("budget.xlsx", workbook_xlsx())

    assert document.blocks == [
        Block("Region: North | First half: 3 | First half: 4 | Owner: Ada", "Budget", None),
        Block("Region: South | First half: 5 | First half: 6.5", "Budget", None),
    ]
    assert document.warnings == ('sheet "Rates" is hidden and was not read',)


def test_a_csv_is_one_table_whose_delimiter_is_sniffed():
    document = parse("export.csv", "name;city\nAda;Zürich\n;\nGrace;Arlington\n".encode())

    assert [block.text for block in document.blocks] == ["name: Ada | city: Zürich", "name: Grace | city: Arlington"]


def test_rows_past_the_limit_are_left_out_with_a_warning(monkeypatch):
    monkeypatch.setattr(sheets, "MAX_ROWS_PER_SHEET", 3)
    document = parse("long.csv", b"n\n" + b"".join(b"%d\n" % n for n in range(10)))

    assert [block.text for block in document.blocks] == ["n: 0", "n: 1"]
    assert document.warnings == ("the CSV: only its first 3 rows were read (the limit)",)


def test_an_encrypted_xlsx_is_named_encrypted():
    with pytest.raises(ParseError, match=r"^the xlsx is encrypted \(password-protected\) and cannot be read"):
        parse("locked.xlsx", encrypted_xlsx())


def test_a_zip_that_is_no_workbook_says_so():
    with pytest.raises(ParseError, match=r"^the xlsx cannot be read \("):
        parse("fake.xlsx", slides_pptx())


def test_an_epubs_chapters_are_sections_and_its_navigation_is_not_text():
    document = parse("guide.epub", book_epub())

    assert document.title == "A Field Guide to the Shore"
    assert document.blocks == [
        Block("Anemones close at low tide.", "Rock pools", None),
        Block("Hermit crabs swap shells.", "Rock pools > Crabs", None),
        Block("Oystercatchers probe the wet sand.", "Chapter 2", None),
    ]


def test_an_epub_of_images_only_says_why_it_has_no_text():
    with pytest.raises(ParseError, match=r"^the epub has no text: its 2 chapters show only images \(1\)"):
        parse("plates.epub", book_epub(images_only=True))


def test_an_email_gives_its_headers_body_attachments_and_forwarded_message_as_sections():
    document = parse("message.eml", nested_eml())

    assert document.title == "Budget and keys"
    assert [(block.section, block.text) for block in document.blocks] == [
        (
            "Budget and keys",
            "From: Ada <ada@example.org>\nTo: team@example.org\nDate: Mon, 07 Dec 2026 09:00:00 +0000\n"
            "Subject: Budget and keys",
        ),
        # The plain alternative is the body, not the HTML one as well.
        ("Budget and keys", "Here is the budget."),
        ("Budget and keys", "See the forwarded note about the keys."),
        ("Budget and keys > budget.csv", "region: North | total: 12"),
        ("Budget and keys > Depot keys", "From: Grace <grace@example.org>\nSubject: Depot keys"),
        ("Budget and keys > Depot keys", "The depot keys are with the night porter."),
        ("Budget and keys > Depot keys > keys.txt", "Spare keys hang in cabinet seven."),
    ]
    (warning,) = document.warnings
    assert warning.startswith('attachment "tool.exe" was not read: unsupported file type "tool.exe"')


def test_an_archive_whose_markup_together_passes_the_limit_is_refused(monkeypatch):
    from ingestion.parsing import archives

    monkeypatch.setattr(archives, "MAX_MARKUP_SIZE", 1024)
    with pytest.raises(
        ParseError, match=r"^the pptx's XML is larger than 1024 bytes uncompressed together \(the limit\)$"
    ):
        parse("deck.pptx", slides_pptx())
