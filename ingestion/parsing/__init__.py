"""Document parsers: uploaded bytes in, text blocks with their section path (and PDF page) out.

Every parser is bounded (see the limits in each module) and reports failure as ParseError, whose
message is shown to the user as the document's error.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import PurePath

from .archives import OLE_SIGNATURE
from .docx import parse_docx
from .epub import parse_epub
from .html import parse_html
from .mail import parse_eml
from .markdown import parse_markdown
from .pdf import parse_image, parse_pdf
from .pptx import parse_pptx
from .sheets import parse_csv, parse_xlsx
from .text import parse_text
from .types import (
    MAX_EXTRACTED_TEXT,
    Block,
    OcrOptions,
    ParsedDocument,
    ParseError,
    ProgressCallback,
    UnsupportedFormat,
    check_extracted_text_size,
    text_size,
)

__all__ = [
    "MAX_EXTRACTED_TEXT",
    "SNIFF_WINDOW",
    "SUPPORTED_EXTENSIONS",
    "Block",
    "OcrOptions",
    "ParseError",
    "ParsedDocument",
    "UnsupportedFormat",
    "check_upload",
    "parse_document",
]

FORMAT_BY_EXTENSION = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".csv": "csv",
    ".epub": "epub",
    ".eml": "email",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".webp": "webp",
}
SUPPORTED_EXTENSIONS = tuple(FORMAT_BY_EXTENSION)
# Read by OCR in the PDF's child process.
IMAGE_FORMATS = ("png", "jpeg", "tiff", "webp")

# PDFs, images and e-mails are not here: the first two run in a child process under the
# deadline, and an e-mail's attachments are read by the parser of their own format.
_IN_PROCESS_PARSERS: dict[str, Callable[[bytes], ParsedDocument]] = {
    "docx": parse_docx,
    "pptx": parse_pptx,
    "xlsx": parse_xlsx,
    "csv": parse_csv,
    "epub": parse_epub,
    "html": parse_html,
    "markdown": parse_markdown,
    "text": parse_text,
}

EMPTY_DOCUMENT = "the document contains no text"

# How many first bytes of an upload are sniffed: enough for a PDF header after the junk some
# writers put before it, and for a text file's first lines.
SNIFF_WINDOW = 1024
# Readers (Acrobat, pdf.js) accept the header anywhere in the first kilobyte.
PDF_SIGNATURE = b"%PDF-"
ZIP_SIGNATURE = b"PK\x03\x04"
# Unicode text whose byte order mark says it is UTF-16 or UTF-32, whose NUL bytes are text.
WIDE_TEXT_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE)  # UTF-32-LE's starts as UTF-16-LE's


def _looks_like_pdf(head: bytes) -> str | None:
    return None if PDF_SIGNATURE in head else "no %PDF header"


def _looks_like_office(head: bytes) -> str | None:
    """A zip archive; or an OLE compound file, as an encrypted Office file is, which its parser
    names as such (encrypted, or an older binary format)."""
    return None if head.startswith((ZIP_SIGNATURE, OLE_SIGNATURE)) else "not a zip archive"


def _looks_like_epub(head: bytes) -> str | None:
    return None if head.startswith(ZIP_SIGNATURE) else "not a zip archive"


def _signature(*signatures: bytes, name: str) -> Callable[[bytes], str | None]:
    def sniff(head: bytes) -> str | None:
        return None if head.startswith(signatures) else f"no {name} signature"

    return sniff


def _looks_like_webp(head: bytes) -> str | None:
    return None if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else "no RIFF/WEBP signature"


def _looks_like_text(head: bytes) -> str | None:
    """Text formats have no magic number: "sniffing" one means finding no NUL byte, the mark of
    a binary file (an executable, an image, an archive), unless a UTF-16 or UTF-32 byte order
    mark says the NULs are part of the text. Legacy encodings (Windows-1252 and the like) pass:
    the parser decodes them."""
    if head.startswith(WIDE_TEXT_MARKS) or b"\x00" not in head:
        return None
    return "it contains NUL bytes, as binary files do"


# Why the first bytes of an upload do not look like its format, or None when they do: one
# entry per format, so every format is sniffed and refused in the same words.
_SNIFFERS: dict[str, Callable[[bytes], str | None]] = {
    "pdf": _looks_like_pdf,
    "docx": _looks_like_office,
    "pptx": _looks_like_office,
    "xlsx": _looks_like_office,
    "epub": _looks_like_epub,
    "csv": _looks_like_text,
    "email": _looks_like_text,
    "png": _signature(b"\x89PNG\r\n\x1a\n", name="PNG"),
    "jpeg": _signature(b"\xff\xd8\xff", name="JPEG"),
    "tiff": _signature(b"II*\x00", b"MM\x00*", name="TIFF"),
    "webp": _looks_like_webp,
    "html": _looks_like_text,
    "markdown": _looks_like_text,
    "text": _looks_like_text,
}


def _unsupported_type(filename: str) -> str:
    # The file is named: in an upload of several files it says which one is refused.
    return f'unsupported file type "{filename}": the supported types are {", ".join(SUPPORTED_EXTENSIONS)}'


def check_upload(filename: str, head: bytes) -> str:
    """The canonical format name of an upload, judged by its extension and its first
    SNIFF_WINDOW bytes (``head``), which must look like that format."""
    document_format = _format_of(filename)
    if document_format is None:
        raise UnsupportedFormat(_unsupported_type(filename))
    mismatch = _SNIFFERS[document_format](head[:SNIFF_WINDOW])
    if mismatch is not None:
        raise UnsupportedFormat(f'"{filename}" does not look like a {document_format} file ({mismatch})')
    return document_format


def parse_document(
    *,
    filename: str,
    data: bytes,
    pdf_timeout: float,
    ocr: OcrOptions | None = None,
    on_progress: ProgressCallback | None = None,
) -> ParsedDocument:
    """The document's blocks, or ParseError saying precisely why it cannot be used. Without
    ``ocr`` (the store's OCR is off) scans and images are not read; ``on_progress`` is told the
    pages OCR has read of those it reads (of a PDF or an image, not of an e-mail's attachments)."""
    document = _parse(filename, data, pdf_timeout=pdf_timeout, ocr=ocr, on_progress=on_progress)
    _check_has_text(document)
    return document


def _parse(
    filename: str,
    data: bytes,
    *,
    pdf_timeout: float,
    ocr: OcrOptions | None,
    on_progress: ProgressCallback | None = None,
) -> ParsedDocument:
    document_format = _format_of(filename)
    if document_format is None:
        raise ParseError(_unsupported_type(filename))
    if document_format == "pdf":
        return parse_pdf(data, timeout=pdf_timeout, ocr=ocr, on_progress=on_progress)
    if document_format in IMAGE_FORMATS:
        return parse_image(data, timeout=pdf_timeout, ocr=ocr, on_progress=on_progress)
    if document_format == "email":

        def read_attachment(name: str, content: bytes) -> ParsedDocument:
            try:
                check_upload(name, content[:SNIFF_WINDOW])
            except UnsupportedFormat as exc:
                raise ParseError(str(exc)) from None
            return _parse(name, content, pdf_timeout=pdf_timeout, ocr=ocr)

        return parse_eml(data, read_attachment)
    return _IN_PROCESS_PARSERS[document_format](data)


def _format_of(filename: str) -> str | None:
    # Not PurePath.suffix: it reads a name such as ".txt" as a hidden file without an extension.
    _, dot, extension = PurePath(filename).name.rpartition(".")
    return FORMAT_BY_EXTENSION.get(f".{extension.lower()}") if dot else None


def _check_has_text(document: ParsedDocument) -> None:
    if not document.blocks:
        raise ParseError(EMPTY_DOCUMENT)
    check_extracted_text_size(sum(text_size(block.text) for block in document.blocks))
