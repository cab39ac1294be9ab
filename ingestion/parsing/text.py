"""Plain text: decoding untrusted bytes, and paragraphs separated by blank lines."""

from __future__ import annotations

import codecs
import re

import charset_normalizer

from .types import Block, ParsedDocument, ParseError

UNRECOGNISED_ENCODING = "the text is not in a recognisable encoding (save it as UTF-8)"

# Longest BOMs first: the UTF-32-LE mark starts with the UTF-16-LE one.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)

# charset-normalizer's share of "mess" in a decoding (0 = reads like language); above this we refuse to guess.
_MAX_CHAOS = 0.1

_BLANK_LINES = re.compile(r"\n[ \t\f\v]*\n")


def decode_text(data: bytes) -> str:
    """UTF-8 or a BOM-marked Unicode encoding; otherwise only an encoding charset-normalizer is sure of.

    Windows-1252 is tried before the open detection because short Western European texts are
    often mistaken for a sibling code page (cp1250, Mac Roman) that reads them almost right.
    """
    for attempt in (_decode_marked, _decode_utf8, _detect_western, _detect_any):
        text = attempt(data)
        if text is not None:
            break
    else:
        raise ParseError(UNRECOGNISED_ENCODING)
    # NUL never occurs in text; it is the mark of a binary file that happened to decode.
    if "\x00" in text:
        raise ParseError(UNRECOGNISED_ENCODING)
    return text


def _decode_marked(data: bytes) -> str | None:
    for mark, encoding in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                raise ParseError(UNRECOGNISED_ENCODING) from None
    return None


def _decode_utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _detect_western(data: bytes) -> str | None:
    return _detect(data, cp_isolation=["cp1252"])


def _detect_any(data: bytes) -> str | None:
    return _detect(data, cp_isolation=None)


def _detect(data: bytes, cp_isolation: list[str] | None) -> str | None:
    best = charset_normalizer.from_bytes(data, cp_isolation=cp_isolation).best()
    if best is None or best.chaos > _MAX_CHAOS:
        return None
    try:
        return data.decode(best.encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, line breaks inside them kept, outer whitespace trimmed."""
    pieces = _BLANK_LINES.split(normalise_newlines(text))
    return [piece.strip() for piece in pieces if piece.strip()]


def parse_text(data: bytes) -> ParsedDocument:
    return ParsedDocument(
        blocks=[Block(text=paragraph, section="") for paragraph in paragraphs(decode_text(data))],
        title="",
    )
