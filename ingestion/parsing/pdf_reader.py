"""PDF text with pdfminer.six, run inside the disposable child process (see pdf_child)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from pdfminer.converter import PDFPageAggregator
from pdfminer.layout import LAParams, LTComponent, LTImage, LTLayoutContainer, LTTextBox
from pdfminer.pdfdocument import PDFDocument, PDFEncryptionError, PDFNoValidXRef
from pdfminer.pdffont import PDFFont
from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pdfminer.pdfparser import PDFParser
from pdfminer.pdftypes import PDFObjRef, PDFStream
from pdfminer.psparser import LIT
from pdfminer.utils import decode_text

from .types import MIB, OcrOptions, ParseError, ProgressCallback, check_extracted_text_size, describe_size, text_size

MAX_PAGES = 2000
MAX_PAGE_TEXT = 2 * MIB
MAX_PAGE_TREE_DEPTH = 64
MAX_PAGE_TREE_NODES = 10_000

ENCRYPTED = "the PDF is encrypted and cannot be read"
# Opened without a password, yet nothing readable came out: its decryption, not a scan, is the
# likelier cause, and the remedy (an unencrypted copy) differs.
ENCRYPTED_WITHOUT_TEXT = (
    "the PDF is encrypted and no text could be read from it; upload a copy saved without encryption"
)
NO_PAGES = "the PDF has no pages"
BROKEN_XREF = "the PDF's cross-reference table is broken and its pages cannot be found"
NO_TEXT_LAYER = "the PDF has no text layer (it looks scanned) and OCR is off for this store"
# A page showing an image with less text than this is a scan (a stamped page number or a
# scanner's header line does not make a text layer): it is read by OCR.
MIN_TEXT_CHARACTERS = 20
SELF_REFERENCING_TREE = "the PDF page tree references itself"

_PAGE = LIT("Page")
_INHERITABLE = ("Resources", "MediaBox", "CropBox", "Rotate")
# A chain of references to references is legal but never long; a loop of them would never end.
_MAX_REFERENCE_CHAIN = 32
_MAX_DETAIL = 200


@dataclass(frozen=True)
class PageRef:
    object_id: int | None
    attributes: dict[str, Any]


@dataclass(frozen=True)
class PageTree:
    pages: list[PageRef]
    # Every reference on the way to the pages led to an object: an empty tree is then really empty.
    complete: bool


@dataclass(frozen=True)
class PdfText:
    title: str
    pages: list[list[str]]
    warnings: list[str] = field(default_factory=list)
    ocr_pages: int = 0


@dataclass(frozen=True)
class TextLayer:
    """What the text layer holds: the text, the pages that look scanned, and why there is no text
    when there is none."""

    text: PdfText
    scanned_pages: list[int]
    no_text_reason: str


def read_pdf(data: bytes, ocr: OcrOptions | None = None) -> PdfText:
    """Paragraphs (pdfminer's layout text boxes) of every page the page tree really holds; pages
    that look scanned are read by OCR when ``ocr`` is given."""
    return with_ocr(data, read_text_layer(data), ocr)


def read_text_layer(data: bytes) -> TextLayer:
    document = open_document(data)
    tree = find_pages(document)
    if not tree.complete:
        document, tree = _recover(data, document, tree)
    if not tree.pages:
        raise ParseError(NO_PAGES)
    reader = _PageReader(document)
    paragraphs = [reader.paragraphs(page, number) for number, page in enumerate(tree.pages, start=1)]
    text = PdfText(title=_info_title(document), pages=paragraphs)
    return TextLayer(text, reader.scanned_pages, "" if any(paragraphs) else reader.no_text_reason(len(paragraphs)))


def with_ocr(data: bytes, layer: TextLayer, ocr: OcrOptions | None, on_page: ProgressCallback | None = None) -> PdfText:
    """The text layer with its scanned pages read by OCR (or named in a warning when OCR is off)."""
    text = layer.text
    if layer.scanned_pages:
        text = _with_scanned_pages(data, text, layer.scanned_pages, ocr, on_page)
    if not any(text.pages):
        # An encrypted file whose pages read as bare images is likelier mis-decrypted than scanned:
        # that reason, and its remedy, outrank what OCR made of the images.
        encrypted = layer.no_text_reason == ENCRYPTED_WITHOUT_TEXT
        raise ParseError(text.warnings[0] if text.warnings and not encrypted else layer.no_text_reason)
    return text


def _with_scanned_pages(
    data: bytes, text: PdfText, scanned: list[int], ocr: OcrOptions | None, on_page: ProgressCallback | None
) -> PdfText:
    if ocr is None:
        if not any(text.pages):
            return text
        pages = ", ".join(map(str, scanned))
        return PdfText(
            text.title, text.pages, [f"pages without a text layer were not read (OCR is off for this store): {pages}"]
        )
    from .ocr import read_pdf_pages  # in the child only, and only for scans: it loads pdfium and PIL

    result = read_pdf_pages(data, scanned, ocr, on_page)
    for number, paragraphs in result.texts.items():
        text.pages[number - 1][:] = paragraphs
    warnings = result.warnings
    if not any(text.pages) and not result.texts:
        warnings = [f"no page of the scanned PDF could be read by OCR: {'; '.join(warnings)}"]
    elif not any(text.pages):
        warnings = [f"OCR found no text on the {_count(len(scanned), 'scanned page')}"]
    return PdfText(text.title, text.pages, warnings, ocr_pages=len(result.texts))


class _ScannedDocument(PDFDocument):
    """Locates every object by scanning the file for its "N 0 obj" header instead of reading the cross-reference
    table: pdfminer falls back to that scan only when the table cannot be parsed at all."""

    def find_xref(self, parser: PDFParser) -> int:
        raise PDFNoValidXRef("the cross-reference table is not used")


def _recover(data: bytes, document: PDFDocument, tree: PageTree) -> tuple[PDFDocument, PageTree]:
    """A cross-reference table can parse and still point at the wrong bytes: through it the catalog or parts of
    the page tree resolve to nothing, and a PDF with pages seems to have fewer or none. The document is then
    read again without the table, and whichever reading finds more pages is kept."""
    try:
        rescanned = open_document(data, scan=True)
    except ParseError:
        rescanned = None
    rescanned_tree = find_pages(rescanned) if rescanned is not None else None
    if rescanned_tree is not None and len(rescanned_tree.pages) > len(tree.pages):
        return rescanned, rescanned_tree
    if tree.pages or (rescanned_tree is not None and rescanned_tree.complete):
        return document, tree
    raise ParseError(BROKEN_XREF)


def open_document(data: bytes, *, scan: bool = False) -> PDFDocument:
    try:
        return (_ScannedDocument if scan else PDFDocument)(PDFParser(BytesIO(data)))
    except PDFEncryptionError:
        # pdfminer opens PDFs whose user password is empty; only the others end here.
        raise ParseError(ENCRYPTED) from None
    except Exception as exc:  # pdfminer raises anything from KeyError to struct.error on broken files
        raise ParseError(f"the file is not a readable PDF ({_detail(exc)})") from exc


def find_pages(document: PDFDocument) -> PageTree:
    """Walks /Root → /Pages → /Kids by hand: /Count is never trusted, cycles and runaway trees stop early."""
    walk = _PageTreeWalk()
    try:
        walk.visit(document.catalog.get("Pages"), inherited={}, depth=1)
    except ParseError:
        raise
    except Exception as exc:
        raise ParseError(f"the PDF page tree could not be read ({_detail(exc)})") from exc
    # pdfminer leaves the catalog empty when /Root refers to nothing.
    return PageTree(pages=walk.pages, complete=bool(document.catalog) and not walk.dangling)


class _PageTreeWalk:
    def __init__(self) -> None:
        self.pages: list[PageRef] = []
        self.dangling = 0
        self._nodes = 0
        self._open_nodes: set[int] = set()

    def visit(self, reference: object, *, inherited: dict[str, Any], depth: int) -> None:
        self._count_node(depth)
        object_id = reference.objid if isinstance(reference, PDFObjRef) else None
        if object_id is not None and object_id in self._open_nodes:
            raise ParseError(SELF_REFERENCING_TREE)
        node = _resolve(reference)
        if node is None and object_id is not None:
            self.dangling += 1
        if not isinstance(node, dict):
            return
        if node.get("Type") is _PAGE:
            self._add_page(PageRef(object_id, inherited | node))
        elif "Kids" in node:
            handed_down = inherited | {key: node[key] for key in _INHERITABLE if key in node}
            self._visit_kids(object_id, _resolve(node["Kids"]), handed_down, depth)

    def _visit_kids(self, object_id: int | None, kids: object, inherited: dict[str, Any], depth: int) -> None:
        if not isinstance(kids, list):
            return
        if object_id is not None:
            self._open_nodes.add(object_id)
        for kid in kids:
            self.visit(kid, inherited=inherited, depth=depth + 1)
        if object_id is not None:
            self._open_nodes.remove(object_id)

    def _count_node(self, depth: int) -> None:
        self._nodes += 1
        if self._nodes > MAX_PAGE_TREE_NODES:
            raise ParseError(f"the PDF page tree has more than {MAX_PAGE_TREE_NODES} nodes (the limit)")
        if depth > MAX_PAGE_TREE_DEPTH:
            raise ParseError(f"the PDF page tree is nested more than {MAX_PAGE_TREE_DEPTH} levels deep (the limit)")

    def _add_page(self, page: PageRef) -> None:
        if len(self.pages) == MAX_PAGES:
            raise ParseError(f"the PDF has more than {MAX_PAGES} pages (the limit)")
        self.pages.append(page)


def _resolve(value: object) -> object:
    for _ in range(_MAX_REFERENCE_CHAIN):
        if not isinstance(value, PDFObjRef):
            return value
        value = value.resolve()
    return None


class _TextDevice(PDFPageAggregator):
    """Counts the characters whose font maps them to no text, where pdfminer would write a "(cid:N)" placeholder
    into the text: a placeholder means nothing to a reader or a search, and a page of them buries the real words."""

    unmapped_characters = 0

    def handle_undefined_char(self, font: PDFFont, cid: int) -> str:
        self.unmapped_characters += 1
        return ""


class _PageReader:
    """Lays out pages one by one within the text bounds, noting what each page holds besides text so that
    a PDF without any text can be told apart: scanned, drawings only, undecodable, or fonts without a text map."""

    def __init__(self, document: PDFDocument) -> None:
        self._document = document
        resources = PDFResourceManager(caching=True)
        # all_texts: text drawn inside form XObjects (LTFigure) is laid out too instead of being lost.
        self._device = _TextDevice(resources, laparams=LAParams(all_texts=True))
        self._interpreter = PDFPageInterpreter(resources, self._device)
        self._extracted = 0
        # Keyed by id(): the document caches its objects, so a stream shared by several pages is one object.
        self._undecodable_streams: dict[int, bool] = {}
        self._undecodable_pages = 0
        self._image_pages = 0
        self.scanned_pages: list[int] = []

    def paragraphs(self, page: PageRef, number: int) -> list[str]:
        try:
            pdf_page = PDFPage(self._document, page.object_id, page.attributes, None)
            # Every stream is checked, not just up to the first bad one: a later page may share it.
            undecodable = any([self._undecodable(_resolve(content)) for content in pdf_page.contents])
            self._interpreter.process_page(pdf_page)
            layout = self._device.get_result()
        except Exception as exc:
            raise ParseError(f"page {number} of the PDF could not be read ({_detail(exc)})") from exc
        items = list(_layout_items(layout))
        paragraphs = [text for item in items if isinstance(item, LTTextBox) and (text := _box_paragraph(item))]
        if undecodable:
            self._undecodable_pages += 1
        if any(isinstance(item, LTImage) for item in items):
            self._image_pages += 1
            if sum(len(text) for text in paragraphs) < MIN_TEXT_CHARACTERS:
                self.scanned_pages.append(number)
        self._count_text(paragraphs, number)
        return paragraphs

    def no_text_reason(self, page_count: int) -> str:
        if self._document.encryption is not None:
            return ENCRYPTED_WITHOUT_TEXT
        if self._undecodable_pages:
            pages = _count(self._undecodable_pages, "page")
            verb = "has" if self._undecodable_pages == 1 else "have"
            return f"the PDF has no readable text: {pages} {verb} content streams that cannot be decoded"
        if self._device.unmapped_characters:
            characters = _count(self._device.unmapped_characters, "character")
            return f"the PDF has no readable text: its fonts map none of its {characters} to text"
        if self._image_pages:
            return NO_TEXT_LAYER
        return f"the PDF has no text: no text on {_count(page_count, 'page')}, no images"

    def _undecodable(self, content: object) -> bool:
        """pdfminer decodes a stream it cannot inflate to nothing, silently; encoded bytes that decode to
        nothing are what tells. It runs before the interpreter decodes the page, which discards the encoded bytes."""
        if not isinstance(content, PDFStream):
            return False
        if id(content) not in self._undecodable_streams:
            encoded = content.rawdata
            self._undecodable_streams[id(content)] = bool(encoded) and not content.get_data()
        return self._undecodable_streams[id(content)]

    def _count_text(self, paragraphs: list[str], number: int) -> None:
        size = sum(text_size(paragraph) for paragraph in paragraphs)
        if size > MAX_PAGE_TEXT:
            raise ParseError(
                f"page {number} of the PDF has more than {describe_size(MAX_PAGE_TEXT)} of text (the limit per page)"
            )
        self._extracted += size
        check_extracted_text_size(self._extracted)


def _layout_items(container: LTLayoutContainer) -> Iterator[LTComponent]:
    """Every item of a page's layout, looking into figures but not into text boxes."""
    for item in container:
        yield item
        if isinstance(item, LTLayoutContainer):
            yield from _layout_items(item)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _box_paragraph(box: LTTextBox) -> str:
    """A text box is a paragraph: its layout line breaks are not the author's.

    NUL (which a font's ToUnicode map can produce) is dropped: PostgreSQL text cannot hold it.
    """
    return " ".join(box.get_text().replace("\x00", "").split())


def _info_title(document: PDFDocument) -> str:
    for info in document.info:
        title = _resolve(info.get("Title"))
        if isinstance(title, bytes):
            return " ".join(decode_text(title).split())
    return ""


def _detail(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:_MAX_DETAIL]
