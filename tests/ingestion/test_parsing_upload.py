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
from ingestion.parsing.archives import OLE_SIGNATURE

# The first bytes of a real file of each format.
HEADS = {
    "pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n",
    "docx": b"PK\x03\x04rest",
    "pptx": b"PK\x03\x04rest",
    "xlsx": b"PK\x03\x04rest",
    "epub": b"PK\x03\x04\x14\x00\x00\x00\x00\x00mimetypeapplication/epub+zip",
    "csv": b"region,total\nNorth,12\n",
    "email": b"From: a@example.org\nSubject: hello\n\nbody",
    "png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "jpeg": b"\xff\xd8\xff\xe0\x00\x10JFIF",
    "tiff": b"II*\x00\x08\x00\x00\x00",
    "webp": b"RIFF\x24\x00\x00\x00WEBPVP8 ",
    "html": b"<!doctype html>\n<title>t</title>",
    "markdown": b"# Notes\n\nCaf\xe9 in Windows-1252 is text too.",
    "text": b"plain words",
}
SUPPORTED = (
    r"the supported types are \.pdf, \.docx, \.pptx, \.xlsx, \.csv, \.epub, \.eml, \.html, \.htm, \.md, "
    r"\.markdown, \.txt, \.png, \.jpg, \.jpeg, \.tif, \.tiff, \.webp$"
)


def unsupported(filename: str) -> str:
    return rf'^unsupported file type "{re.escape(filename)}": {SUPPORTED}'


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("report.pdf", "pdf"),
        ("Report.PDF", "pdf"),
        ("letter.docx", "docx"),
        ("slides.pptx", "pptx"),
        ("budget.xlsx", "xlsx"),
        # An encrypted Office file is an OLE compound file: its parser says it is encrypted.
        ("locked.xlsx", "ole"),
        ("export.csv", "csv"),
        ("book.epub", "epub"),
        ("message.eml", "email"),
        ("scan.png", "png"),
        ("photo.JPG", "jpeg"),
        ("photo.jpeg", "jpeg"),
        ("fax.tif", "tiff"),
        ("fax.tiff", "tiff"),
        ("phone.webp", "webp"),
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
    if expected == "ole":
        head, expected = OLE_SIGNATURE, filename.rpartition(".")[2]
    else:
        head = HEADS[expected]
    assert check_upload(filename, head) == expected


def test_every_supported_extension_is_listed():
    assert SUPPORTED_EXTENSIONS == (
        *(".pdf", ".docx", ".pptx", ".xlsx", ".csv", ".epub", ".eml", ".html", ".htm", ".md", ".markdown", ".txt"),
        *(".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp"),
    )


@pytest.mark.parametrize("filename", ["payload.exe", "notes", "slides.ppt", "page.html.zip", "notes.", ".bashrc"])
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
        ("slides.pptx", b"%PDF-1.7\n", "not a zip archive"),
        ("book.epub", OLE_SIGNATURE, "not a zip archive"),
        ("export.csv", b"\x7fELF\x02\x01\x01\x00", "it contains NUL bytes, as binary files do"),
        ("scan.png", b"\xff\xd8\xff\xe0", "no PNG signature"),
        ("photo.jpeg", b"\x89PNG\r\n\x1a\n", "no JPEG signature"),
        ("fax.tiff", b"%PDF-1.7\n", "no TIFF signature"),
        ("phone.webp", b"RIFF\x24\x00\x00\x00WAVEfmt ", "no RIFF/WEBP signature"),
        ("notes.txt", b"\x7fELF\x02\x01\x01\x00", "it contains NUL bytes, as binary files do"),
        ("README.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "it contains NUL bytes, as binary files do"),
        ("index.html", b"<html>" + b"\x00" * 4, "it contains NUL bytes, as binary files do"),
    ],
)
def test_every_format_is_sniffed_and_refused_in_the_same_words(filename, head, why):
    extension = filename.rpartition(".")[2]
    document_format = {"md": "markdown", "txt": "text"}.get(extension, extension)
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
