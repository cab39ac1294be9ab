import codecs
import re

import pytest

from ingestion.parsing import (
    SUPPORTED_EXTENSIONS,
    ParseError,
    UnsupportedFormat,
    check_upload,
    parse_document,
    types,
)

# The first bytes of a real file of each format.
HEADS = {
    "pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n",
    "docx": b"PK\x03\x04rest",
    "html": b"<!doctype html>\n<title>t</title>",
    "markdown": b"# Notes\n\nCaf\xe9 in Windows-1252 is text too.",
    "text": b"plain words",
}
SUPPORTED = r"the supported types are \.pdf, \.docx, \.html, \.htm, \.md, \.markdown, \.txt$"


def unsupported(filename: str) -> str:
    return rf'^unsupported file type "{re.escape(filename)}": {SUPPORTED}'


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("report.pdf", "pdf"),
        ("Report.PDF", "pdf"),
        ("letter.docx", "docx"),
        ("index.html", "html"),
        ("index.htm", "html"),
        ("README.md", "markdown"),
        ("notes.markdown", "markdown"),
        ("notes.txt", "text"),
        ("archive.2024.txt", "text"),
        # A name that is only an extension still has it.
        (".txt", "text"),
        (".md", "markdown"),
        ("uploads/.TXT", "text"),
    ],
)
def test_supported_extensions_map_to_their_format(filename, expected):
    assert check_upload(filename, HEADS[expected]) == expected


def test_every_supported_extension_is_listed():
    assert SUPPORTED_EXTENSIONS == (".pdf", ".docx", ".html", ".htm", ".md", ".markdown", ".txt")


@pytest.mark.parametrize("filename", ["payload.exe", "notes", "slides.pptx", "page.html.zip", "notes.", ".bashrc"])
def test_other_extensions_are_refused_naming_the_file_and_the_supported_types(filename):
    with pytest.raises(UnsupportedFormat, match=unsupported(filename)):
        check_upload(filename, b"")


def test_a_docx_that_is_not_a_zip_is_refused_at_upload():
    with pytest.raises(UnsupportedFormat) as refused:
        check_upload("Quarterly report.docx", b"%PDF-1.7\n")
    assert str(refused.value) == '"Quarterly report.docx" does not look like a docx file (not a zip archive)'


@pytest.mark.parametrize(
    ("filename", "head", "why"),
    [
        ("setup.pdf", b"MZ\x90\x00\x03\x00\x00\x00", "no %PDF header"),
        ("letter.docx", b"\x7fELF\x02\x01\x01\x00", "not a zip archive"),
        ("notes.txt", b"\x7fELF\x02\x01\x01\x00", "it contains NUL bytes, as binary files do"),
        ("README.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "it contains NUL bytes, as binary files do"),
        ("index.html", b"<html>" + b"\x00" * 4, "it contains NUL bytes, as binary files do"),
    ],
)
def test_every_format_is_sniffed_and_refused_in_the_same_words(filename, head, why):
    document_format = filename.rpartition(".")[2].replace("md", "markdown").replace("txt", "text")
    with pytest.raises(UnsupportedFormat) as refused:
        check_upload(filename, head)
    assert str(refused.value) == f'"{filename}" does not look like a {document_format} file ({why})'


@pytest.mark.parametrize(
    "head",
    [
        "UTF-16 text".encode("utf-16"),
        "UTF-32 text".encode("utf-32"),
        codecs.BOM_UTF32_BE + "UTF-32".encode("utf-32-be"),
    ],
)
def test_text_whose_byte_order_mark_explains_its_nul_bytes_passes_the_sniffing(head):
    assert check_upload("wide.txt", head) == "text"


def test_a_pdf_header_after_leading_junk_is_found():
    assert check_upload("scan.pdf", b"\r\n" * 100 + b"%PDF-1.4") == "pdf"


def test_parsing_an_unsupported_file_fails_with_the_same_reason():
    with pytest.raises(ParseError, match=unsupported("payload.exe")):
        parse_document(filename="payload.exe", data=b"MZ", pdf_timeout=30)


def test_a_file_named_only_txt_is_parsed_as_text():
    document = parse_document(filename=".txt", data=b"Just a note.", pdf_timeout=30)

    assert [block.text for block in document.blocks] == ["Just a note."]


@pytest.mark.parametrize("filename", ["empty.txt", "empty.md", "empty.html"])
def test_an_empty_file_has_no_text(tmp_path, filename):
    path = tmp_path / filename
    path.write_bytes(b"")

    with pytest.raises(ParseError, match=r"^the document contains no text$"):
        parse_document(filename=filename, data=path.read_bytes(), pdf_timeout=30)


def test_an_empty_pdf_is_not_a_readable_pdf():
    with pytest.raises(ParseError, match=r"^the file is not a readable PDF \("):
        parse_document(filename="empty.pdf", data=b"", pdf_timeout=30)


def test_text_past_20_mib_is_refused(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes((b"ordinary words " * 70_000 + b"\n\n") * 30)

    with pytest.raises(ParseError, match=r"^the extracted text is larger than 20 MiB \(the limit per document\)$"):
        parse_document(filename="big.txt", data=path.read_bytes(), pdf_timeout=30)


def test_the_text_limit_counts_the_utf8_bytes_of_the_blocks(monkeypatch):
    monkeypatch.setattr(types, "MAX_EXTRACTED_TEXT", 10)
    at_the_limit = "éééé\n\n\n\n é".encode()
    past_the_limit = "éééé\n\nabc".encode()

    assert len(parse_document(filename="a.txt", data=at_the_limit, pdf_timeout=30).blocks) == 2
    with pytest.raises(ParseError, match=r"^the extracted text is larger than 10 bytes \(the limit per document\)$"):
        parse_document(filename="a.txt", data=past_the_limit, pdf_timeout=30)
