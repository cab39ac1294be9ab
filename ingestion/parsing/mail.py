"""E-mail (.eml) with the standard library's `email`: the headers, the body (plain text, or the
HTML part when there is no plain one), and each attachment of a supported type as sections of
their own; attached messages (message/rfc822) are read the same way, nested up to a limit."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Callable
from email.message import EmailMessage

from .html import parse_html
from .sections import SECTION_SEPARATOR
from .text import paragraphs
from .types import Block, ParsedDocument, ParseError

MAX_ATTACHMENTS = 100
MAX_NESTED_MESSAGES = 8
HEADERS = ("From", "To", "Cc", "Date", "Subject")
NO_SUBJECT = "(no subject)"
_PART_EXTENSIONS = {"text/plain": ".txt", "text/html": ".html", "text/csv": ".csv"}

# Reads an attachment (its file name and bytes) with the parser of its type, or raises
# ParseError (its type is not supported, or it cannot be read).
AttachmentReader = Callable[[str, bytes], ParsedDocument]


def parse_eml(data: bytes, read_attachment: AttachmentReader) -> ParsedDocument:
    try:
        message = email.message_from_bytes(data, policy=email.policy.default)
    except (RecursionError, ValueError, TypeError) as exc:
        raise ParseError(f"the e-mail cannot be read ({type(exc).__name__})") from exc
    reader = _MessageReader(read_attachment)
    try:
        reader.read(message, depth=0, prefix="")
    except RecursionError as exc:
        raise ParseError("the e-mail's MIME parts are nested too deeply to read") from exc
    subject = _header(message, "Subject")
    return ParsedDocument(
        blocks=reader.blocks, title=subject, warnings=tuple(reader.warnings), ocr_pages=reader.ocr_pages
    )


class _MessageReader:
    def __init__(self, read_attachment: AttachmentReader) -> None:
        self.read_attachment = read_attachment
        self.blocks: list[Block] = []
        self.warnings: list[str] = []
        self.attachments = 0
        self.ocr_pages = 0

    def read(self, message: EmailMessage, *, depth: int, prefix: str) -> None:
        section = prefix + (_header(message, "Subject") or NO_SUBJECT)
        headers = [f"{name}: {value}" for name in HEADERS if (value := _header(message, name))]
        if headers:
            self.blocks.append(Block(text="\n".join(headers), section=section))
        body = message.get_body(preferencelist=("plain", "html"))
        if body is not None:
            self.blocks += [Block(text=text, section=section) for text in _body_texts(body)]
        for number, part in enumerate(message.iter_attachments(), start=1):
            self.attachments += 1
            if self.attachments > MAX_ATTACHMENTS:
                self.warnings.append(f"only the first {MAX_ATTACHMENTS} attachments were read (the limit)")
                return
            if part.get_content_type() == "message/rfc822":
                self._read_attached_message(part, depth=depth, section=section)
            else:
                self._read_attachment(part, number, section=section)

    def _read_attached_message(self, part: EmailMessage, *, depth: int, section: str) -> None:
        if depth + 1 > MAX_NESTED_MESSAGES:
            self.warnings.append(f"messages attached more than {MAX_NESTED_MESSAGES} levels deep were not read")
            return
        attached = part.get_content()
        self.read(attached, depth=depth + 1, prefix=section + SECTION_SEPARATOR)

    def _read_attachment(self, part: EmailMessage, number: int, *, section: str) -> None:
        name = part.get_filename() or f"part {number}{_PART_EXTENSIONS.get(part.get_content_type(), '')}"
        try:
            content = part.get_content()
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
            parsed = self.read_attachment(name, data)
        except ParseError as exc:
            self.warnings.append(f'attachment "{name}" was not read: {exc}')
            return
        except (LookupError, ValueError, TypeError, AttributeError) as exc:  # an unknown charset, a broken encoding
            self.warnings.append(f'attachment "{name}" was not read: it cannot be decoded ({type(exc).__name__})')
            return
        where = section + SECTION_SEPARATOR + name
        self.blocks += [
            Block(text=block.text, section=_joined(where, block.section), page=block.page) for block in parsed.blocks
        ]
        self.warnings += [f'attachment "{name}": {warning}' for warning in parsed.warnings]
        self.ocr_pages += parsed.ocr_pages


def _joined(outer: str, inner: str) -> str:
    return outer + SECTION_SEPARATOR + inner if inner else outer


def _body_texts(body: EmailMessage) -> list[str]:
    try:
        content = body.get_content()
    except (LookupError, ValueError) as exc:
        raise ParseError(f"the e-mail's body cannot be decoded ({type(exc).__name__}: {exc})") from exc
    if body.get_content_type() == "text/html":
        # With a byte order mark: it outranks a <meta charset> the decoded text no longer has.
        return [block.text for block in parse_html(("\ufeff" + content).encode("utf-8")).blocks]
    return paragraphs(content.replace("\x00", ""))


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name, "")
    except (ValueError, TypeError, IndexError):  # a header the policy cannot parse: left out
        value = ""
    return " ".join(str(value or "").split())
