import io
import struct
from pathlib import Path

import docx as python_docx
import pytest

from ingestion.parsing import Block, ParsedDocument, ParseError, parse_document
from tests.ingestion.files.make_hostile import (
    document_xml,
    docx_file,
    repeated_text_docx,
    understated_size_docx,
)

FILES = Path(__file__).parent / "files"


def parse_docx_bytes(data: bytes) -> ParsedDocument:
    return parse_document(filename="report.docx", data=data, pdf_timeout=30)


def parse_file(name: str) -> ParsedDocument:
    return parse_docx_bytes((FILES / name).read_bytes())


def paragraph(text: str, style: str | None = None) -> bytes:
    properties = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{properties}<w:r><w:t>{text}</w:t></w:r></w:p>".encode()


def test_words_heading_1_style_is_the_section_of_what_follows():
    document = parse_file("python-docx-test.docx")

    assert document.title == "python-docx was here!"
    assert document.page_count is None
    assert document.blocks == [Block("python-docx was here too!", "python-docx was here!", None)]


def test_paragraphs_and_table_rows_keep_reading_order():
    document = parse_file("python-docx-blk-inner-content.docx")

    # The table's second row has only empty cells and gives no block; the first keeps its empty cell.
    assert document.blocks == [Block("P1", ""), Block("T2 | ", ""), Block("P3", "")]
    assert document.title == ""


def test_each_table_row_is_one_line_of_cells():
    texts = [block.text for block in parse_file("python-docx-tbl-cell-access.docx").blocks]

    # Four 3x3 tables from Word; merged cells show as one cell.
    assert texts == [
        "1 | 2 | 3", "4 | 5 | 6", "7 | 8 | 9",
        "1 | 2 | 3", "4 | 6", "7 | 8 | 9",
        "1 | 2 | 3", "4 | 5 | 6", "7 |  | 9",
        "1 | 2 | 3", "4 | 6", " | 9",
    ]  # fmt: skip


def test_title_and_heading_styles_written_by_python_docx_form_the_last_two_levels():
    source = python_docx.Document()
    source.add_heading("Operations manual", level=0)
    source.add_paragraph("Read this first.")
    source.add_heading("Install", level=1)
    source.add_paragraph("Download the package.")
    source.add_heading("Docker", level=2)
    source.add_paragraph("Pull the image.")
    source.add_heading("Compose", level=3)
    table = source.add_table(rows=2, cols=2)
    for row, cells in zip(table.rows, [("Service", "Port"), ("gateway", "8080")], strict=True):
        for cell, text in zip(row.cells, cells, strict=True):
            cell.text = text
    source.add_heading("Upgrade", level=1)
    source.add_paragraph("Back up first.")
    buffer = io.BytesIO()
    source.save(buffer)

    document = parse_docx_bytes(buffer.getvalue())

    assert document.title == "Operations manual"
    assert document.blocks == [
        Block("Read this first.", "Operations manual"),
        Block("Download the package.", "Operations manual > Install"),
        Block("Pull the image.", "Install > Docker"),
        Block("Service | Port", "Docker > Compose"),
        Block("gateway | 8080", "Docker > Compose"),
        Block("Back up first.", "Operations manual > Upgrade"),
    ]


def test_heading_style_ids_are_understood_without_a_styles_part():
    body = paragraph("Guide", "Heading1") + paragraph("Setup", "Heading2") + paragraph("Run it.")
    document = parse_docx_bytes(docx_file({"word/document.xml": document_xml(body)}))

    assert document.title == "Guide"
    assert document.blocks == [Block("Run it.", "Guide > Setup")]


def test_localised_style_ids_are_mapped_through_their_style_names():
    styles = (
        b'<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        b'<w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/></w:style>'
        b'<w:style w:type="paragraph" w:styleId="Heading2"><w:name w:val="Quote"/></w:style>'
        b"</w:styles>"
    )
    body = paragraph("Einleitung", "berschrift1") + paragraph("Not a heading", "Heading2") + paragraph("Text.")
    document = parse_docx_bytes(docx_file({"word/document.xml": document_xml(body), "word/styles.xml": styles}))

    assert document.blocks == [Block("Not a heading", "Einleitung"), Block("Text.", "Einleitung")]


def test_tabs_breaks_and_content_controls_are_read():
    body = (
        b"<w:sdt><w:sdtContent>"
        b"<w:p><w:r><w:t>Name</w:t><w:tab/><w:t>Value</w:t><w:br/><w:t>next line</w:t></w:r></w:p>"
        b"</w:sdtContent></w:sdt>"
        b'<w:p><w:r><w:delText>deleted</w:delText><w:t xml:space="preserve"> kept </w:t></w:r></w:p>'
    )
    document = parse_docx_bytes(docx_file({"word/document.xml": document_xml(body)}))

    assert document.blocks == [Block("Name\tValue\nnext line", ""), Block("kept", "")]


def test_a_document_xml_over_32_mib_is_refused():
    with pytest.raises(ParseError, match=r"^word/document\.xml is larger than 32 MiB uncompressed \(the limit\)$"):
        parse_file("zip-bomb.docx")


def test_a_document_xml_expanding_more_than_100_times_is_refused():
    with pytest.raises(
        ParseError, match=r"^word/document\.xml expands more than 100× when uncompressed \(a suspected zip bomb\)$"
    ):
        parse_docx_bytes(repeated_text_docx(4 * 1024 * 1024))


def test_a_zip_header_understating_the_size_is_caught_while_reading():
    with pytest.raises(ParseError, match=r"^the docx is damaged \(word/document\.xml: Bad CRC-32"):
        parse_docx_bytes(understated_size_docx())


def test_a_damaged_deflate_stream_is_reported_as_a_damaged_docx():
    # Found by test_parsing_properties: zlib's own error escaped the parser.
    archive = bytearray(docx_file({"word/document.xml": document_xml(paragraph("Hello"))}))
    # The local header comes first and has no extra field: the deflated bytes follow the name.
    deflated = archive.index(b"word/document.xml") + len(b"word/document.xml")
    archive[deflated] = 0  # a stored block whose length fields do not match

    with pytest.raises(
        ParseError, match=r"^the docx is damaged \(word/document\.xml: Error -3 while decompressing data"
    ):
        parse_docx_bytes(bytes(archive))


def test_a_central_directory_offset_past_the_data_is_reported_as_a_damaged_docx():
    # Found by test_parsing_properties: every member's offset came out negative and seeking to it raised ValueError.
    archive = bytearray(docx_file({"word/document.xml": document_xml(paragraph("Hello"))}))
    end_record = archive.rindex(b"PK\x05\x06")
    archive[end_record + 16 : end_record + 20] = struct.pack("<I", 0x7FFFFFF0)

    with pytest.raises(ParseError, match=r"^the docx is damaged \(word/document\.xml: "):
        parse_docx_bytes(bytes(archive))


def test_a_zip_entry_name_flagged_utf8_that_is_not_is_refused():
    # Found by test_parsing_properties: the UnicodeDecodeError escaped the parser.
    archive = bytearray(docx_file({"word/document.xml": document_xml(paragraph("Hello"))}))
    entry = archive.index(b"PK\x01\x02")
    archive[entry + 8 : entry + 10] = struct.pack("<H", 0x800)  # general purpose flags: the name is UTF-8
    archive[entry + 46] = 0xFF  # the name's first byte

    with pytest.raises(ParseError, match=r"^the docx's zip archive cannot be read \('utf-8' codec can't decode"):
        parse_docx_bytes(bytes(archive))


def test_a_zip_needing_a_newer_zip_version_is_refused():
    # Found by test_parsing_properties: zipfile's NotImplementedError escaped the parser.
    archive = bytearray(docx_file({"word/document.xml": document_xml(paragraph("Hello"))}))
    entry = archive.index(b"PK\x01\x02")
    archive[entry + 6 : entry + 8] = struct.pack("<H", 64)  # version needed to extract: 6.4

    with pytest.raises(ParseError, match=r"^the docx's zip archive cannot be read \(zip file version 6\.4\)$"):
        parse_docx_bytes(bytes(archive))


def test_a_docx_that_is_not_a_zip_is_refused():
    with pytest.raises(ParseError, match=r"^the file is not a valid docx \(not a zip archive\)$"):
        parse_file("not-a-zip.docx")


def test_a_zip_without_word_document_xml_is_refused():
    with pytest.raises(ParseError, match=r"^the docx has no word/document\.xml \(not a Word document\)$"):
        parse_docx_bytes(docx_file({"xl/workbook.xml": b"<workbook/>"}))


def test_malformed_xml_is_refused():
    with pytest.raises(ParseError, match=r"^the docx's word/document\.xml is not well-formed XML \("):
        parse_docx_bytes(docx_file({"word/document.xml": b"<w:document><w:body>"}))


def test_entity_expansion_is_refused():
    laughs = "".join(f'<!ENTITY l{n} "{f"&l{n - 1};" * 10}">' for n in range(1, 10))
    xml = (
        f'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY l0 "lol">{laughs}]>'
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        "<w:body><w:p><w:r><w:t>&l9;</w:t></w:r></w:p></w:body></w:document>"
    ).encode()
    with pytest.raises(ParseError, match=r"not well-formed XML"):
        parse_docx_bytes(docx_file({"word/document.xml": xml}))


def test_external_entities_are_not_loaded():
    xml = (
        b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY secret SYSTEM "file:///etc/passwd">]>'
        b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        b"<w:body><w:p><w:r><w:t>before &secret; after</w:t></w:r></w:p></w:body></w:document>"
    )
    document = parse_docx_bytes(docx_file({"word/document.xml": xml}))

    assert document.blocks == [Block("before  after", "")]


def test_a_docx_with_an_empty_body_has_no_text():
    with pytest.raises(ParseError, match=r"^the document contains no text$"):
        parse_docx_bytes(docx_file({"word/document.xml": document_xml(paragraph(" "))}))
