import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from ingestion.parsing import Block, ParsedDocument, ParseError, parse_document, pdf_reader, types
from ingestion.parsing.pdf import parse_pdf
from tests.ingestion.files.make_hostile import (
    CATALOG,
    encrypted_pdf,
    encrypted_pdf_partly_unreadable,
    many_pages_pdf,
    nested_tree_pdf,
    one_page_pdf,
    page_tree,
    pdf_file,
    stream,
    text_page,
    text_pdf,
    wide_tree_pdf,
)

FILES = Path(__file__).parent / "files"


def parse_file(name: str) -> ParsedDocument:
    return parse_document(filename=name, data=(FILES / name).read_bytes(), pdf_timeout=30)


def parse_pdf_bytes(data: bytes, *, pdf_timeout: float = 30) -> ParsedDocument:
    return parse_document(filename="upload.pdf", data=data, pdf_timeout=pdf_timeout)


def running_pdf_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "ingestion.parsing.pdf_child" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:  # it ended while we looked
            continue
    return found


def test_a_pdf_typeset_by_groff_gives_its_paragraphs_page_by_page():
    document = parse_file("tide-pools.pdf")

    assert document.title == "A Short Guide to Tide Pools"
    assert document.page_count == 3
    assert document.blocks == [
        Block("A Short Guide to Tide Pools", "", 1),
        Block("1. Where to look", "", 1),
        # pdfminer keeps an indented first line in a text box of its own.
        Block(
            "Rocky shores hold water between the tides. The best pools sit low on the shore, where the sea leaves",
            "",
            1,
        ),
        Block("them last and returns to them first.", "", 1),
        Block("Visit an hour before low water and move slowly over the wet rock.", "", 1),
        Block("-2-", "", 2),
        Block("2. What lives there", "", 2),
        Block("Anemones close when the water drains and open again when it returns.", "", 2),
        Block("Hermit crabs trade shells as they grow, and a busy pool may hold several of them.", "", 2),
        Block("-3-", "", 3),
        Block("3. Leaving it as you found it", "", 3),
        Block("Turn stones back the way they were and keep your hands out of the water.", "", 3),
    ]


def test_text_boxes_become_paragraphs_and_pages_without_text_still_count():
    pdf = text_pdf(
        [
            [["First paragraph, line one", "and line two (with parentheses)"], ["Second paragraph"]],
            [],
            [["Third page"]],
        ]
    )

    document = parse_pdf_bytes(pdf)

    assert document.page_count == 3
    assert document.title == ""
    assert document.blocks == [
        Block("First paragraph, line one and line two (with parentheses)", "", 1),
        Block("Second paragraph", "", 1),
        Block("Third page", "", 3),
    ]


def test_nul_characters_mapped_by_a_font_are_dropped():
    to_unicode = stream(
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Nul def "
        b"1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfchar <41> <0000> endbfchar "
        b"endcmap CMapName currentdict /CMap defineresource pop end end"
    )
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>"
    content = stream(b"BT /F1 12 Tf 72 700 Td (NAUL) Tj ET")
    pdf = pdf_file([CATALOG, page_tree([3], count=1), text_page(contents=4, font=5), content, font, to_unicode])

    assert parse_pdf_bytes(pdf).blocks == [Block("NUL", "", 1)]


def test_page_count_is_the_pages_found_not_the_declared_count():
    assert parse_pdf_bytes(one_page_pdf(page_tree([3], count=40), "Only page")).page_count == 1


def test_a_page_tree_that_references_itself_is_refused():
    with pytest.raises(ParseError, match=r"^the PDF page tree references itself$"):
        parse_file("self-referencing-page-tree.pdf")


def test_a_huge_declared_count_stops_at_the_page_limit_quickly():
    started = time.monotonic()
    with pytest.raises(ParseError, match=r"^the PDF has more than 2000 pages \(the limit\)$"):
        parse_file("huge-page-count.pdf")
    assert time.monotonic() - started < 10


def test_the_page_tree_may_be_64_levels_deep_but_no_deeper():
    assert parse_pdf_bytes(nested_tree_pdf(63)).blocks == [Block("Deep down", "", 1)]
    with pytest.raises(ParseError, match=r"^the PDF page tree is nested more than 64 levels deep \(the limit\)$"):
        parse_pdf_bytes(nested_tree_pdf(64))


def test_a_page_tree_of_more_than_10000_nodes_is_refused():
    assert parse_pdf_bytes(wide_tree_pdf(9998)).page_count == 1
    with pytest.raises(ParseError, match=r"^the PDF page tree has more than 10000 nodes \(the limit\)$"):
        parse_pdf_bytes(wide_tree_pdf(9999))


def test_an_encrypted_pdf_is_refused():
    with pytest.raises(ParseError, match=r"^the PDF is encrypted and cannot be read$"):
        parse_file("encrypted.pdf")


def test_a_pdf_encrypted_with_an_empty_user_password_is_read():
    assert parse_pdf_bytes(encrypted_pdf(empty_user_password=True)).blocks == [Block("Sealed text", "", 1)]


def test_an_encrypted_pdf_without_readable_text_is_refused_as_encrypted_not_as_scanned():
    with pytest.raises(ParseError, match=r"^the PDF is encrypted and no text could be read from it; upload a copy"):
        parse_pdf_bytes(encrypted_pdf_partly_unreadable())


def test_a_scanned_pdf_without_a_text_layer_is_refused_when_ocr_is_off():
    with pytest.raises(
        ParseError, match=r"^the PDF has no text layer \(it looks scanned\) and OCR is off for this store$"
    ):
        parse_file("scanned.pdf")


def test_random_bytes_are_not_a_readable_pdf():
    no_root = r"^the file is not a readable PDF \(No /Root object! - Is this really a PDF\?\)$"
    with pytest.raises(ParseError, match=no_root):
        parse_file("random-bytes.pdf")


def test_a_pdf_without_pages_is_refused():
    pdf = pdf_file([CATALOG, page_tree([], count=0)])
    with pytest.raises(ParseError, match=r"^the PDF has no pages$"):
        parse_pdf_bytes(pdf)


HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def single_page_pdf(content: bytes, font: bytes = HELVETICA, *more_objects: bytes) -> bytes:
    """Object 3 is the page, 4 its content stream (`content` is the whole stream object), 5 its font /F1."""
    return pdf_file([CATALOG, page_tree([3], count=1), text_page(contents=4, font=5), content, font, *more_objects])


def drawing_page() -> bytes:
    return stream(b"0 0 m 300 300 l S 72 72 200 100 re f")


def test_characters_a_font_maps_to_no_text_leave_no_placeholder():
    # Helvetica's standard encoding has no character for bytes 1-3: pdfminer wrote "(cid:1)" for them.
    pdf = single_page_pdf(stream(b"BT /F1 12 Tf 72 700 Td (Tide pools\\001\\002\\003) Tj ET"))

    assert parse_pdf_bytes(pdf).blocks == [Block("Tide pools", "", 1)]


def test_a_pdf_whose_fonts_map_nothing_to_text_says_so():
    # A CID font without a ToUnicode map: its glyph numbers are not characters.
    font = b"<< /Type /Font /Subtype /Type0 /BaseFont /Glyphs /Encoding /Identity-H /DescendantFonts [6 0 R] >>"
    cid_font = (
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Glyphs "
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> >>"
    )
    pdf = single_page_pdf(stream(b"BT /F1 12 Tf 72 700 Td <002A0048004F0052> Tj ET"), font, cid_font)

    with pytest.raises(
        ParseError, match=r"^the PDF has no readable text: its fonts map none of its 4 characters to text$"
    ):
        parse_pdf_bytes(pdf)


def test_pages_holding_only_drawings_are_not_called_scanned():
    pdf = pdf_file(
        [CATALOG, page_tree([3, 4], count=2), *[text_page(contents=5, font=6)] * 2, drawing_page(), HELVETICA]
    )

    with pytest.raises(ParseError, match=r"^the PDF has no text: no text on 2 pages, no images$"):
        parse_pdf_bytes(pdf)


def test_content_streams_that_cannot_be_decoded_are_named():
    corrupt = stream(b"these bytes are not deflated", b"/Filter /FlateDecode ")
    pdf = pdf_file(
        [
            CATALOG,
            page_tree([3, 4], count=2),
            text_page(contents=5, font=6),
            text_page(contents=7, font=6),
            corrupt,
            HELVETICA,
            drawing_page(),
        ]
    )

    with pytest.raises(
        ParseError, match=r"^the PDF has no readable text: 1 page has content streams that cannot be decoded$"
    ):
        parse_pdf_bytes(pdf)


def test_a_content_stream_shared_by_two_pages_counts_for_both():
    corrupt = stream(b"these bytes are not deflated", b"/Filter /FlateDecode ")
    pdf = pdf_file([CATALOG, page_tree([3, 4], count=2), *[text_page(contents=5, font=6)] * 2, corrupt, HELVETICA])

    with pytest.raises(
        ParseError, match=r"^the PDF has no readable text: 2 pages have content streams that cannot be decoded$"
    ):
        parse_pdf_bytes(pdf)


def with_xref_offsets_shifted(pdf: bytes, shift: int) -> bytes:
    """The cross-reference table still parses, but every offset in it points `shift` bytes off its object."""
    return re.sub(rb"(\d{10}) 00000 n", lambda entry: b"%010d 00000 n" % (int(entry.group(1)) + shift), pdf)


@pytest.mark.parametrize("shift", [7, -3])
def test_pages_behind_a_broken_cross_reference_table_are_recovered(shift):
    pdf = with_xref_offsets_shifted(text_pdf([[["First page"]], [["Second page"]]]), shift)

    document = parse_pdf_bytes(pdf)

    assert document.page_count == 2
    assert document.blocks == [Block("First page", "", 1), Block("Second page", "", 2)]


def test_a_broken_cross_reference_table_whose_pages_cannot_be_recovered_says_so():
    # Only objects whose "N 0 obj" starts a line can be found without the table; here only the catalog does.
    pdf = text_pdf([[["Lost page"]]]).replace(b"endobj\n", b"endobj ")

    with pytest.raises(ParseError, match=r"^the PDF's cross-reference table is broken and its pages cannot be found$"):
        parse_pdf_bytes(with_xref_offsets_shifted(pdf, 7))
    assert parse_pdf_bytes(pdf).blocks == [Block("Lost page", "", 1)]


def test_a_page_over_the_per_page_text_limit_is_named(monkeypatch):
    # The real limit (2 MiB) would take pdfminer minutes to lay out; the reader runs in-process here.
    monkeypatch.setattr(pdf_reader, "MAX_PAGE_TEXT", 40)
    pdf = text_pdf([[["short page"]], [["this page holds more than forty bytes of text"]]])

    with pytest.raises(ParseError, match=r"^page 2 of the PDF has more than 40 bytes of text \(the limit per page\)$"):
        pdf_reader.read_pdf(pdf)


def test_the_document_text_limit_applies_while_pages_are_extracted(monkeypatch):
    monkeypatch.setattr(types, "MAX_EXTRACTED_TEXT", 25)
    pdf = text_pdf([[["twenty bytes of text"]], [["twenty more bytes..."]]])

    with pytest.raises(ParseError, match=r"^the extracted text is larger than 25 bytes \(the limit per document\)$"):
        pdf_reader.read_pdf(pdf)


def test_parsing_past_the_deadline_kills_the_child():
    started = time.monotonic()
    with pytest.raises(ParseError, match=r"^PDF parsing took longer than 0\.5s \(PDF_PARSE_TIMEOUT\)$"):
        parse_pdf_bytes(many_pages_pdf(600), pdf_timeout=0.5)

    assert time.monotonic() - started < 5
    assert running_pdf_children() == []


def python_child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_killed_by_a_signal_is_reported():
    command = python_child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(ParseError, match=r"^the PDF parser was killed by signal SIGSEGV$"):
        parse_pdf(b"%PDF-1.4", timeout=30, command=command)


def test_a_child_that_crashes_is_reported_with_its_last_words():
    command = python_child("import sys; sys.stdin.buffer.read(); raise MemoryError('out of memory')")
    with pytest.raises(ParseError, match=r"^the PDF parser crashed \(exit status 1: MemoryError: out of memory\)$"):
        parse_pdf(b"%PDF-1.4", timeout=30, command=command)


def test_a_child_that_exits_without_reading_its_input_is_reported():
    command = python_child("import sys; sys.exit(3)")
    with pytest.raises(ParseError, match=r"^the PDF parser crashed \(exit status 3\)$"):
        parse_pdf(b"x" * (8 * 1024 * 1024), timeout=30, command=command)


@pytest.mark.parametrize("output", ["not json", '{"pages": 3}', '{"title": "t", "pages": [["ok", 7]]}', "[" * 100_000])
def test_garbage_from_the_child_is_reported(output):
    command = python_child(f"import sys; sys.stdout.write({output!r})")
    with pytest.raises(ParseError, match=r"^the PDF parser returned unreadable output$"):
        parse_pdf(b"%PDF-1.4", timeout=30, command=command)
