"""Property tests of the parsers: any bytes end as a bounded document or a ParseError that says why.

Never another exception, never a hang, never output out of proportion to the input. Valid small DOCX and
PDF files are mutated as well as random bytes fed, since random bytes rarely get past the first check.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestion.parsing import MAX_EXTRACTED_TEXT, ParsedDocument, ParseError, parse_document, pdf_reader
from ingestion.parsing.types import text_size
from tests.ingestion.files.make_hostile import document_xml, docx_file, text_pdf

# Deterministic (the same examples on every run, no example database) and fast enough for every test run.
IN_PROCESS = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    # A generous bound: these inputs parse in milliseconds, so only runaway (superlinear) work reaches it.
    deadline=5000,
    # Generating examples can be slow on a loaded machine; that is no failure of the code under test.
    suppress_health_check=[HealthCheck.too_slow],
)
# Each example starts a child process; its own timeout (PDF_TIMEOUT) bounds it, so no deadline here.
PDF_CHILD = settings(IN_PROCESS, max_examples=15, deadline=None)
PDF_TIMEOUT = 30


def check_outcome(filename: str, data: bytes) -> ParsedDocument | None:
    """The document if it parsed, after checking it is within bounds; None if it failed with a reason."""
    try:
        document = parse_document(filename=filename, data=data, pdf_timeout=PDF_TIMEOUT)
    except ParseError as exc:
        assert str(exc).strip()
        # A small file parses in well under the deadline: reaching it means a loop that never ends.
        assert "took longer than" not in str(exc)
        return None
    assert document.blocks
    assert isinstance(document.title, str)
    assert sum(text_size(block.text) for block in document.blocks) <= MAX_EXTRACTED_TEXT
    for block in document.blocks:
        assert block.text.strip()
        # PostgreSQL text cannot hold NUL.
        assert "\x00" not in block.text
        assert "\x00" not in block.section
    return document


def check_text_outcome(filename: str, data: bytes) -> None:
    document = check_outcome(filename, data)
    if document is not None:
        # Text formats only ever drop or replace characters: each input byte gives at most one character.
        assert sum(len(block.text) for block in document.blocks) <= len(data)
        assert all(block.page is None for block in document.blocks)


# ---- text, Markdown, HTML --------------------------------------------------------------------------

ENCODINGS = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-32", "cp1252", "latin-1", "shift_jis"])


@st.composite
def encoded(draw: st.DrawFn, pieces: st.SearchStrategy[str]) -> bytes:
    text = draw(st.lists(pieces, max_size=40).map("".join))
    return text.encode(draw(ENCODINGS), errors="replace")


TEXT_PIECES = st.one_of(st.text(max_size=20), st.sampled_from(["\n", "\r\n", "\r", "\n\n", " \t\n", "\x00"]))
MARKDOWN_PIECES = st.one_of(
    TEXT_PIECES,
    st.sampled_from(["# ", "## ", "###### ", "####### ", "#", "```", "~~~", "````", "---", "===", "- ", "* ", "1. "]),
    st.sampled_from(["---\ntitle: x\n---\n", "    indented", " #", "C#", "Heading ##"]),
)
HTML_PIECES = st.one_of(
    TEXT_PIECES,
    st.sampled_from(["<p>", "</p>", "<div>", "</div>", "<h1>", "</h1>", "<h2>", "<h3>", "<h4>", "<title>", "</title>"]),
    st.sampled_from(["<table>", "<tr>", "<td>", "<th>", "</td>", "</tr>", "<pre>", "</pre>", "<br>", "<li>", "<ul>"]),
    st.sampled_from(["<script>", "</script>", "<style>", "<nav>", "<svg>", "<!--", "-->", "<![CDATA[", "<?xml ?>"]),
    st.sampled_from(["&amp;", "&#0;", "&#x10FFFF;", "&nbsp;", "&", "<", ">", '<meta charset="utf-16">']),
    st.sampled_from(['<meta charset="shift_jis">', "<meta charset=bogus>", "<b>", "</b>", "<span>", "</html>"]),
)


@IN_PROCESS
@given(data=st.one_of(st.binary(max_size=2000), encoded(TEXT_PIECES)))
def test_any_bytes_named_txt_give_bounded_text_or_a_reason(data):
    check_text_outcome("notes.txt", data)


@IN_PROCESS
@given(data=st.one_of(st.binary(max_size=2000), encoded(MARKDOWN_PIECES)))
def test_any_bytes_named_md_give_bounded_text_or_a_reason(data):
    check_text_outcome("notes.md", data)


@IN_PROCESS
@given(data=st.one_of(st.binary(max_size=2000), encoded(HTML_PIECES)))
def test_any_bytes_named_html_give_bounded_text_or_a_reason(data):
    check_text_outcome("page.html", data)


# ---- mutations of valid files ----------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """`original` with a few bytes overwritten, inserted or deleted, or cut short."""
    data = bytearray(original)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        position = draw(st.integers(min_value=0, max_value=len(data)))
        kind = draw(st.sampled_from(["overwrite", "insert", "delete", "truncate"]))
        replacement = draw(st.binary(min_size=1, max_size=8))
        if kind == "overwrite":
            data[position : position + len(replacement)] = replacement
        elif kind == "insert":
            data[position:position] = replacement
        elif kind == "delete":
            del data[position : position + len(replacement)]
        else:
            del data[position:]
    return bytes(data)


# ---- DOCX ------------------------------------------------------------------------------------------

_STYLES = (
    b'<?xml version="1.0" encoding="UTF-8"?><w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b'<w:style w:styleId="Heading1"><w:name w:val="heading 1"/></w:style></w:styles>'
)
_BODY = (
    b'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Tide pools</w:t></w:r></w:p>'
    b"<w:p><w:r><w:t>Anemones close when the water drains.</w:t><w:tab/><w:t>Crabs trade shells.</w:t></w:r></w:p>"
    b"<w:tbl><w:tr><w:tc><w:p><w:r><w:t>Pool</w:t></w:r></w:p></w:tc>"
    b"<w:tc><w:p><w:r><w:t>Depth</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"
)
SMALL_DOCX = docx_file({"word/document.xml": document_xml(_BODY), "word/styles.xml": _STYLES})
DOCX_BODY_PIECES = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["<w:p>", "</w:p>", "<w:r>", "</w:r>", "<w:t>", "</w:t>", "<w:tab/>", "<w:br/>", "<w:tbl>"]),
    st.sampled_from(["</w:tbl>", "<w:tr>", "</w:tr>", "<w:tc>", "</w:tc>", "<w:sdt>", "</w:sdt>", "&amp;", "&bogus;"]),
    st.sampled_from(['<w:pPr><w:pStyle w:val="Heading1"/></w:pPr>', '<w:pStyle w:val="Title"/>', "&#0;", "\x00"]),
)


@IN_PROCESS
@given(data=st.one_of(mutated(SMALL_DOCX), st.binary(max_size=2000).map(lambda tail: b"PK\x03\x04" + tail)))
def test_any_docx_bytes_give_bounded_text_or_a_reason(data):
    check_outcome("report.docx", data)


@IN_PROCESS
@given(body=st.lists(DOCX_BODY_PIECES, max_size=40).map("".join))
def test_any_document_xml_in_a_valid_zip_gives_bounded_text_or_a_reason(body):
    data = docx_file({"word/document.xml": document_xml(body.encode("utf-8", errors="replace"))})

    document = check_outcome("report.docx", data)

    if document is not None:
        assert sum(len(block.text) for block in document.blocks) <= len(body)


# ---- PDF -------------------------------------------------------------------------------------------

SMALL_PDF = text_pdf([[["A Short Guide to Tide Pools"], ["Rocky shores hold water", "between the tides."]], [["-2-"]]])
PDF_BYTES = st.one_of(mutated(SMALL_PDF), st.binary(max_size=2000).map(lambda tail: b"%PDF-1.4\n" + tail))


def check_pdf_text(pages: list[list[str]]) -> None:
    for paragraph in (paragraph for page in pages for paragraph in page):
        assert paragraph.strip()
        assert "(cid:" not in paragraph
        assert "\x00" not in paragraph
    assert sum(text_size(paragraph) for page in pages for paragraph in page) <= MAX_EXTRACTED_TEXT


@IN_PROCESS
@given(data=PDF_BYTES)
def test_the_pdf_reader_ends_any_bytes_in_bounded_text_or_a_parse_error(data):
    # In-process, so that an exception other than ParseError is seen as itself, not as a crashed child.
    try:
        text = pdf_reader.read_pdf(data)
    except ParseError as exc:
        assert str(exc).strip()
        return
    assert 1 <= len(text.pages) <= pdf_reader.MAX_PAGES
    check_pdf_text(text.pages)


@PDF_CHILD
@given(data=PDF_BYTES)
def test_any_pdf_bytes_give_bounded_text_or_a_reason(data):
    document = check_outcome("report.pdf", data)

    if document is not None:
        assert document.page_count is not None
        assert all(1 <= block.page <= document.page_count for block in document.blocks)
        assert all("(cid:" not in block.text for block in document.blocks)


@pytest.mark.parametrize("original", [SMALL_DOCX, SMALL_PDF], ids=["docx", "pdf"])
def test_the_files_that_are_mutated_parse(original):
    # Otherwise every mutation would fail for a reason that has nothing to do with it.
    name = "report.docx" if original is SMALL_DOCX else "report.pdf"
    assert check_outcome(name, original) is not None
