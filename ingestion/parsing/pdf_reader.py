"""PDF text with pdfminer.six, run inside the disposable child process (see pdf_child)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from pdfminer.converter import PDFPageAggregator
from pdfminer.layout import LAParams, LTLayoutContainer, LTTextBox
from pdfminer.pdfdocument import PDFDocument, PDFEncryptionError
from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pdfminer.pdfparser import PDFParser
from pdfminer.pdftypes import PDFObjRef
from pdfminer.psparser import LIT
from pdfminer.utils import decode_text

from .types import MIB, ParseError, check_extracted_text_size, describe_size, text_size

MAX_PAGES = 2000
MAX_PAGE_TEXT = 2 * MIB
MAX_PAGE_TREE_DEPTH = 64
MAX_PAGE_TREE_NODES = 10_000

ENCRYPTED = "the PDF is encrypted and cannot be read"
NO_TEXT_LAYER = "the PDF has no text layer (it looks scanned) and OCR is not supported"
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
class PdfText:
    title: str
    pages: list[list[str]]


def read_pdf(data: bytes) -> PdfText:
    """Paragraphs (pdfminer's layout text boxes) of every page the page tree really holds."""
    document = open_document(data)
    pages = find_pages(document)
    if not pages:
        raise ParseError("the PDF has no pages")
    paragraphs = list(_paragraphs_per_page(document, pages))
    if not any(paragraphs):
        raise ParseError(NO_TEXT_LAYER)
    return PdfText(title=_info_title(document), pages=paragraphs)


def open_document(data: bytes) -> PDFDocument:
    try:
        return PDFDocument(PDFParser(BytesIO(data)))
    except PDFEncryptionError:
        # pdfminer opens PDFs whose user password is empty; only the others end here.
        raise ParseError(ENCRYPTED) from None
    except Exception as exc:  # pdfminer raises anything from KeyError to struct.error on broken files
        raise ParseError(f"the file is not a readable PDF ({_detail(exc)})") from exc


def find_pages(document: PDFDocument) -> list[PageRef]:
    """Walks /Root → /Pages → /Kids by hand: /Count is never trusted, cycles and runaway trees stop early."""
    walk = _PageTreeWalk()
    try:
        walk.visit(document.catalog.get("Pages"), inherited={}, depth=1)
    except ParseError:
        raise
    except Exception as exc:
        raise ParseError(f"the PDF page tree could not be read ({_detail(exc)})") from exc
    return walk.pages


class _PageTreeWalk:
    def __init__(self) -> None:
        self.pages: list[PageRef] = []
        self._nodes = 0
        self._open_nodes: set[int] = set()

    def visit(self, reference: object, *, inherited: dict[str, Any], depth: int) -> None:
        self._count_node(depth)
        object_id = reference.objid if isinstance(reference, PDFObjRef) else None
        if object_id is not None and object_id in self._open_nodes:
            raise ParseError(SELF_REFERENCING_TREE)
        node = _resolve(reference)
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


def _paragraphs_per_page(document: PDFDocument, pages: list[PageRef]) -> Iterator[list[str]]:
    resources = PDFResourceManager(caching=True)
    # all_texts: text drawn inside form XObjects (LTFigure) is laid out too instead of being lost.
    device = PDFPageAggregator(resources, laparams=LAParams(all_texts=True))
    interpreter = PDFPageInterpreter(resources, device)
    extracted = 0
    for number, page in enumerate(pages, start=1):
        paragraphs = _page_paragraphs(document, page, number, interpreter, device)
        size = sum(text_size(paragraph) for paragraph in paragraphs)
        if size > MAX_PAGE_TEXT:
            raise ParseError(
                f"page {number} of the PDF has more than {describe_size(MAX_PAGE_TEXT)} of text (the limit per page)"
            )
        extracted += size
        check_extracted_text_size(extracted)
        yield paragraphs


def _page_paragraphs(
    document: PDFDocument, page: PageRef, number: int, interpreter: PDFPageInterpreter, device: PDFPageAggregator
) -> list[str]:
    try:
        interpreter.process_page(PDFPage(document, page.object_id, page.attributes, None))
        layout = device.get_result()
    except Exception as exc:
        raise ParseError(f"page {number} of the PDF could not be read ({_detail(exc)})") from exc
    return [paragraph for paragraph in map(_box_paragraph, _text_boxes(layout)) if paragraph]


def _text_boxes(container: LTLayoutContainer) -> Iterator[LTTextBox]:
    for item in container:
        if isinstance(item, LTTextBox):
            yield item
        elif isinstance(item, LTLayoutContainer):
            yield from _text_boxes(item)


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
