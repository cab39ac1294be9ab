"""Document parsers: uploaded bytes in, text blocks with their section path (and PDF page) out.

Every parser is bounded (see the limits in each module) and reports failure as ParseError, whose
message is shown to the user as the document's error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath

from .docx import parse_docx
from .html import parse_html
from .markdown import parse_markdown
from .pdf import parse_pdf
from .text import parse_text
from .types import (
    MAX_EXTRACTED_TEXT,
    Block,
    ParsedDocument,
    ParseError,
    UnsupportedFormat,
    check_extracted_text_size,
    text_size,
)

__all__ = [
    "MAX_EXTRACTED_TEXT",
    "SUPPORTED_EXTENSIONS",
    "Block",
    "ParseError",
    "ParsedDocument",
    "UnsupportedFormat",
    "check_upload",
    "parse_document",
]

FORMAT_BY_EXTENSION = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
}
SUPPORTED_EXTENSIONS = tuple(FORMAT_BY_EXTENSION)

# PDFs are not here: they take the deadline and run in a child process.
_IN_PROCESS_PARSERS: dict[str, Callable[[bytes], ParsedDocument]] = {
    "docx": parse_docx,
    "html": parse_html,
    "markdown": parse_markdown,
    "text": parse_text,
}

ZIP_SIGNATURE = b"PK\x03\x04"
EMPTY_DOCUMENT = "the document contains no text"


def _unsupported_type(filename: str) -> str:
    # The file is named: in an upload of several files it says which one is refused.
    return f'unsupported file type "{filename}": the supported types are {", ".join(SUPPORTED_EXTENSIONS)}'


def check_upload(filename: str, head: bytes) -> str:
    """The canonical format name of an upload, judged by its extension and, for DOCX, its first bytes."""
    document_format = _format_of(filename)
    if document_format is None:
        raise UnsupportedFormat(_unsupported_type(filename))
    if document_format == "docx" and not head.startswith(ZIP_SIGNATURE):
        raise UnsupportedFormat(f'"{filename}" does not look like a docx file (not a zip archive)')
    return document_format


def parse_document(*, filename: str, data: bytes, pdf_timeout: float) -> ParsedDocument:
    """The document's blocks, or ParseError saying precisely why it cannot be used."""
    document_format = _format_of(filename)
    if document_format is None:
        raise ParseError(_unsupported_type(filename))
    if document_format == "pdf":
        document = parse_pdf(data, timeout=pdf_timeout)
    else:
        document = _IN_PROCESS_PARSERS[document_format](data)
    _check_has_text(document)
    return document


def _format_of(filename: str) -> str | None:
    # Not PurePath.suffix: it reads a name such as ".txt" as a hidden file without an extension.
    _, dot, extension = PurePath(filename).name.rpartition(".")
    return FORMAT_BY_EXTENSION.get(f".{extension.lower()}") if dot else None


def _check_has_text(document: ParsedDocument) -> None:
    if not document.blocks:
        raise ParseError(EMPTY_DOCUMENT)
    check_extracted_text_size(sum(text_size(block.text) for block in document.blocks))
