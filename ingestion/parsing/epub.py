"""EPUB with ebooklib: the spine's documents in reading order, each a chapter read as HTML (its
h1–h3 headings give the sections; text before any heading takes the chapter's title)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from .archives import open_archive
from .html import parse_html
from .types import Block, ParsedDocument, ParseError

if TYPE_CHECKING:
    from ebooklib import epub

MAX_CHAPTERS = 5000
ENCRYPTION_PART = "META-INF/encryption.xml"


def parse_epub(data: bytes) -> ParsedDocument:
    # Imported here, as each office reader is: the package is imported by every PDF child too.
    from ebooklib import epub

    with open_archive(data, "epub") as archive:
        # Font obfuscation is listed there too: it tells only once no text could be read.
        encryption_listed = ENCRYPTION_PART in archive.namelist()
    try:
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
        chapters = [_spine_document(book, idref) for idref, _ in book.spine]
    except ParseError:
        raise
    except Exception as exc:  # ebooklib raises anything from KeyError to its own EpubException
        raise ParseError(f"the epub cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from exc
    chapters = [chapter for chapter in chapters if chapter is not None]
    if len(chapters) > MAX_CHAPTERS:
        raise ParseError(f"the epub has more than {MAX_CHAPTERS} chapters (the limit)")
    blocks = []
    for number, chapter in enumerate(chapters, start=1):
        parsed = parse_html(chapter.get_content())
        chapter_title = parsed.title or f"Chapter {number}"
        blocks += [Block(text=block.text, section=block.section or chapter_title) for block in parsed.blocks]
    if not blocks:
        raise ParseError(_no_text_reason(book, len(chapters), encryption_listed=encryption_listed))
    titles = book.get_metadata("DC", "title")
    return ParsedDocument(blocks=blocks, title=" ".join(titles[0][0].split()) if titles else "")


def _spine_document(book: epub.EpubBook, idref: str) -> epub.EpubItem | None:
    """A reading-order document; the navigation document (a table of contents) is not one."""
    import ebooklib
    from ebooklib import epub

    item = book.get_item_with_id(idref)
    if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or isinstance(item, epub.EpubNav):
        return None
    return item


def _no_text_reason(book: epub.EpubBook, chapter_count: int, *, encryption_listed: bool) -> str:
    import ebooklib

    if encryption_listed:
        return "the epub is encrypted (DRM) and its text cannot be read"
    images = len(list(book.get_items_of_type(ebooklib.ITEM_IMAGE)))
    if images:
        return (
            f"the epub has no text: its {chapter_count} chapters show only images ({images}), "
            "as a scanned or picture book does; images inside an epub are not read by OCR"
        )
    return "the epub has no text"
