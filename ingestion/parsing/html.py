"""HTML: visible text of block elements, h1–h3 as the section path, <title> as the title."""

from __future__ import annotations

import codecs
import re

import lxml.html
from lxml import etree

from .sections import Headings, section_path, with_heading
from .text import normalise_newlines
from .types import Block, ParsedDocument, ParseError

# Invisible or repeated on every page of a site (menus, banners), so never worth retrieving.
DROPPED_TAGS = ("head", "script", "style", "nav", "header", "footer", "svg", "noscript", "template")

BLOCK_TAGS = frozenset(
    """address article aside blockquote body caption center dd details dialog dir div dl dt fieldset
    figcaption figure form h1 h2 h3 h4 h5 h6 hgroup hr html legend li main menu ol p section summary
    table tbody td tfoot th thead ul""".split()
)

HTML_SECTION_DEPTH = 3

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_HEADING_TAG = re.compile(r"h([1-6])")
_SNIFF_WINDOW = 1024
_CELL_SEPARATOR = " | "

# One entry of the walk's work stack: an element to expand, inline text, or a block boundary.
_ELEMENT, _TEXT, _BOUNDARY = "element", "text", "boundary"


def parse_html(data: bytes) -> ParsedDocument:
    """h4–h6 are ordinary blocks; without a <title>, the first heading is the title."""
    markup = decode_html(data)
    if not markup.strip():
        return ParsedDocument(blocks=[], title="")
    root = _parse_tree(markup)
    title = collapse_whitespace(root.findtext(".//title") or "")
    _drop_invisible(root)
    walker = _BlockWalker(section_depth=HTML_SECTION_DEPTH)
    blocks = walker.walk(root)
    return ParsedDocument(blocks=blocks, title=title or walker.first_heading)


def decode_html(data: bytes) -> str:
    """As a browser reads it: BOM, then <meta charset>, then UTF-8, then Windows-1252."""
    return normalise_newlines(data.decode(_sniff_encoding(data), errors="replace"))


def collapse_whitespace(text: str) -> str:
    return " ".join(text.split())


def _sniff_encoding(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    declared = _declared_encoding(data[:_SNIFF_WINDOW])
    if declared is not None:
        return declared
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def _declared_encoding(head: bytes) -> str | None:
    """The <meta> charset if Python knows it; a declared UTF-16 or UTF-32 without a BOM is a lie (the meta is ASCII)."""
    declared = _META_CHARSET.search(head)
    if declared is None:
        return None
    try:
        name = codecs.lookup(declared.group(1).decode("ascii")).name
    except LookupError:
        return None
    return None if name.startswith(("utf-16", "utf-32")) else name


def _parse_tree(markup: str) -> lxml.html.HtmlElement:
    # The text is already decoded: forcing UTF-8 makes lxml ignore a (possibly wrong) <meta charset>.
    parser = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True)
    try:
        root = lxml.html.document_fromstring(markup.encode("utf-8"), parser=parser)
    except (etree.ParserError, ValueError) as exc:
        raise ParseError(f"the HTML could not be parsed ({exc})") from exc
    # The parser recovers from broken markup, but past a resource limit (such as 256 levels of
    # nesting) it silently drops the rest of the page.
    for error in parser.error_log:
        if error.type == etree.ErrorTypes.ERR_RESOURCE_LIMIT:
            raise ParseError(f"the HTML could not be read completely ({error.message})")
    return root


def _drop_invisible(root: lxml.html.HtmlElement) -> None:
    for element in list(root.iter(*DROPPED_TAGS)):
        element.drop_tree()


def _heading_level(tag: str) -> int | None:
    match = _HEADING_TAG.fullmatch(tag)
    return int(match.group(1)) if match else None


class _BlockWalker:
    """Emits each block element's own text once: text around a nested block is split off before and after it.

    The walk keeps its own stack instead of recursing, so deeply nested markup cannot exhaust Python's stack.
    """

    def __init__(self, section_depth: int) -> None:
        self.section_depth = section_depth
        self.first_heading = ""
        self.blocks: list[Block] = []
        self._headings: Headings = ()
        self._inline: list[str] = []

    def walk(self, root: lxml.html.HtmlElement) -> list[Block]:
        work: list[tuple[str, object]] = [(_ELEMENT, root)]
        while work:
            kind, item = work.pop()
            if kind == _TEXT:
                self._inline.append(str(item))
            elif kind == _BOUNDARY:
                self._flush()
            else:
                if item is not root and item.tail:
                    work.append((_TEXT, item.tail))
                work.extend(self._expand(item))
        self._flush()
        return self.blocks

    def _expand(self, element: lxml.html.HtmlElement) -> list[tuple[str, object]]:
        """The work an element (without its tail) adds to the stack, last step first."""
        tag = element.tag if isinstance(element.tag, str) else ""
        level = _heading_level(tag)
        if level is not None and level <= self.section_depth:
            self._flush()
            self._enter_heading(level, flat_text(element))
            return []
        if tag == "pre":
            self._flush()
            self._emit(element.text_content().strip("\n").rstrip())
            return []
        if tag == "tr":
            self._flush()
            self._emit(_row_text(element))
            return []
        if tag == "br":
            return [(_TEXT, " ")]
        inner = [(_ELEMENT, child) for child in reversed(element)]
        if element.text:
            inner.append((_TEXT, element.text))
        if tag in BLOCK_TAGS:
            return [(_BOUNDARY, None), *inner, (_BOUNDARY, None)]
        return inner

    def _enter_heading(self, level: int, title: str) -> None:
        if not title:
            return
        self.first_heading = self.first_heading or title
        self._headings = with_heading(self._headings, level, title)

    def _flush(self) -> None:
        text = collapse_whitespace("".join(self._inline))
        self._inline = []
        self._emit(text)

    def _emit(self, text: str) -> None:
        if text:
            self.blocks.append(Block(text=text, section=section_path(self._headings)))


def flat_text(element: lxml.html.HtmlElement) -> str:
    """An element's visible text on one line, with its inner blocks separated by spaces."""
    return " ".join(block.text for block in _BlockWalker(section_depth=0).walk(element))


def _row_text(row: lxml.html.HtmlElement) -> str:
    cells = [flat_text(cell) for cell in row if cell.tag in ("td", "th")]
    return _CELL_SEPARATOR.join(cells) if any(cells) else ""
