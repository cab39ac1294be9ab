"""What every parser returns, the errors it raises, and the bounds shared by all formats."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ragmux.core.units import MIB

# Tells the PDF child how many CPU seconds it may use (the parse deadline plus a margin).
CPU_LIMIT_VARIABLE = "RAGMUX_PDF_CPU_SECONDS"
# Tells it what it reads (a PDF or an image) and how it runs OCR (see pdf_child).
CHILD_OPTIONS_VARIABLE = "RAGMUX_PARSE_CHILD_OPTIONS"
MAX_EXTRACTED_TEXT = 20 * MIB
# Told (pages read, pages to read) as OCR goes; the child writes each step as a line to stderr.
ProgressCallback = Callable[[int, int], None]
_PROGRESS_LINE = re.compile(rb"progress (\d{1,9}) (\d{1,9})\n?")


def progress_line(done: int, total: int) -> str:
    return f"progress {done} {total}\n"


def parse_progress_line(line: bytes) -> tuple[int, int] | None:
    match = _PROGRESS_LINE.fullmatch(line)
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class Block:
    """One paragraph, list item, table row, code block… with where it sits in the document."""

    text: str
    section: str
    page: int | None = None


@dataclass(frozen=True)
class ParsedDocument:
    blocks: list[Block]
    title: str
    page_count: int | None = None
    # What was left out of an otherwise readable document, each in words ("page 4: …").
    warnings: tuple[str, ...] = ()
    # The pages (or images) whose text came from OCR.
    ocr_pages: int = 0


@dataclass(frozen=True)
class OcrOptions:
    """How OCR runs for one document: the store's language and the deployment's limits."""

    language: str
    max_pages: int
    page_timeout: float
    max_pixels: int


class ParseError(Exception):
    """The document cannot be read; the message is shown to the user as the document's error."""


class UnsupportedFormat(Exception):
    """The upload is refused before it is stored; the message says why."""


def text_size(text: str) -> int:
    return len(text.encode("utf-8"))


def describe_size(size: int) -> str:
    return f"{size // MIB} MiB" if size % MIB == 0 else f"{size} bytes"


def check_extracted_text_size(size: int) -> None:
    """Raises once the extracted text (counted in UTF-8 bytes) passes MAX_EXTRACTED_TEXT."""
    if size > MAX_EXTRACTED_TEXT:
        limit = describe_size(MAX_EXTRACTED_TEXT)
        raise ParseError(f"the extracted text is larger than {limit} (the limit per document)")
