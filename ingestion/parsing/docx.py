"""DOCX: word/document.xml read straight from the zip, with bounds against decompression bombs (see archives)."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator

from lxml import etree

from .archives import open_archive, read_member
from .sections import Headings, section_path, with_heading
from .types import Block, ParsedDocument, ParseError

DOCUMENT_PART = "word/document.xml"
STYLES_PART = "word/styles.xml"

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_PARAGRAPH, _TABLE, _ROW, _CELL = f"{_W}p", f"{_W}tbl", f"{_W}tr", f"{_W}tc"
_RUN_TEXT = {f"{_W}t": None, f"{_W}tab": "\t", f"{_W}br": "\n", f"{_W}cr": "\n"}
_TITLE_LEVEL = 0
# Word writes built-in style names in English ("heading 1") whatever the UI language; ids may be localised.
_HEADING_STYLE = re.compile(r"heading\s*([1-9])", re.IGNORECASE)
_CELL_SEPARATOR = " | "


def parse_docx(data: bytes) -> ParsedDocument:
    """Title and Heading 1–9 paragraphs form the section path and are not blocks themselves.

    Table rows become "cell | cell" lines.
    """
    with open_archive(data, "docx") as archive:
        body = _read_part(archive, DOCUMENT_PART).find(f"{_W}body")
        styles = _read_part(archive, STYLES_PART) if STYLES_PART in archive.namelist() else None
    if body is None:
        return ParsedDocument(blocks=[], title="")
    return _document_from_body(body, _style_names(styles))


def _read_part(archive: zipfile.ZipFile, name: str) -> etree._Element:
    try:
        member = archive.getinfo(name)
    except KeyError:
        raise ParseError(f"the docx has no {name} (not a Word document)") from None
    return _parse_xml(name, read_member(archive, member, "docx"))


def _parse_xml(name: str, content: bytes) -> etree._Element:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        return etree.fromstring(content, parser=parser)
    except etree.XMLSyntaxError as exc:
        raise ParseError(f"the docx's {name} is not well-formed XML ({exc})") from exc


def _style_names(styles: etree._Element | None) -> dict[str, str]:
    if styles is None:
        return {}
    names = {}
    for style in styles.iter(f"{_W}style"):
        name = style.find(f"{_W}name")
        if name is not None:
            names[style.get(f"{_W}styleId", "")] = name.get(f"{_W}val", "")
    return names


def _heading_level(style_id: str, style_names: dict[str, str]) -> int | None:
    name = style_names.get(style_id, style_id).strip()
    if name.lower() == "title":
        return _TITLE_LEVEL
    match = _HEADING_STYLE.fullmatch(name)
    return int(match.group(1)) if match else None


def _document_from_body(body: etree._Element, style_names: dict[str, str]) -> ParsedDocument:
    headings: Headings = ()
    title = first_heading = ""
    blocks = []
    for element in _content_elements(body):
        if element.tag == _TABLE:
            blocks.extend(Block(text=row, section=section_path(headings)) for row in _table_rows(element))
            continue
        text = _paragraph_text(element)
        level = _heading_level(_style_id(element), style_names)
        if level is None:
            if text:
                blocks.append(Block(text=text, section=section_path(headings)))
        elif text:
            headings = with_heading(headings, level, text)
            title = title or (text if level == _TITLE_LEVEL else "")
            first_heading = first_heading or text
    return ParsedDocument(blocks=blocks, title=title or first_heading)


def _content_elements(container: etree._Element) -> Iterator[etree._Element]:
    """Paragraphs and tables in reading order, looking through wrappers such as content controls (w:sdt)."""
    for child in container:
        if child.tag in (_PARAGRAPH, _TABLE):
            yield child
        elif isinstance(child.tag, str):
            yield from _content_elements(child)


def _style_id(paragraph: etree._Element) -> str:
    style = paragraph.find(f"{_W}pPr/{_W}pStyle")
    return style.get(f"{_W}val", "") if style is not None else ""


def _paragraph_text(paragraph: etree._Element) -> str:
    pieces = []
    for element in paragraph.iter(*_RUN_TEXT):
        fixed_text = _RUN_TEXT[element.tag]
        pieces.append(_literal_text(element) if fixed_text is None else fixed_text)
    return "".join(pieces).strip()


def _literal_text(element: etree._Element) -> str:
    """The element's text around any unresolved entity reference (which the parser keeps as a child node)."""
    return "".join([element.text or "", *(child.tail or "" for child in element)])


def _table_rows(table: etree._Element) -> list[str]:
    """One "cell | cell" line per row; rows with only empty cells are skipped. Nested tables join their cell's text."""
    rows = []
    for row in table.iter(_ROW):
        if _enclosing_table(row) is not table:
            continue
        cells = [_cell_text(cell) for cell in row.iter(_CELL) if _enclosing_row(cell) is row]
        if any(cells):
            rows.append(_CELL_SEPARATOR.join(cells))
    return rows


def _cell_text(cell: etree._Element) -> str:
    paragraphs = (_paragraph_text(paragraph) for paragraph in cell.iter(_PARAGRAPH))
    return " ".join(text for text in paragraphs if text)


def _enclosing_table(element: etree._Element) -> etree._Element | None:
    return next(element.iterancestors(_TABLE), None)


def _enclosing_row(element: etree._Element) -> etree._Element | None:
    return next(element.iterancestors(_ROW), None)
