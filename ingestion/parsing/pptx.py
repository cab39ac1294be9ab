"""PowerPoint (.pptx) with python-pptx: a section per slide, titled by the slide's title, with its
text frames, tables (a "cell | cell" line per row) and speaker notes; page = slide number."""

from __future__ import annotations

import io
from collections.abc import Iterator

from .archives import READ_ERRORS, check_archive
from .types import Block, ParsedDocument, ParseError

CELL_SEPARATOR = " | "
MAX_SLIDES = 2000
# Group shapes nest; a hostile file could nest them until the stack gives out.
MAX_GROUP_DEPTH = 32
NOTES_PREFIX = "Notes: "


def parse_pptx(data: bytes) -> ParsedDocument:
    # Imported here, as each office reader is: the package is imported by every PDF child too.
    import pptx
    from pptx.exc import PackageNotFoundError

    check_archive(data, "pptx")
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
        slides = list(presentation.slides)
    except PackageNotFoundError:
        raise ParseError("the pptx has no presentation part (not a PowerPoint file)") from None
    except (KeyError, *READ_ERRORS, SyntaxError) as exc:  # lxml's XMLSyntaxError is a SyntaxError
        raise ParseError(f"the pptx cannot be read ({type(exc).__name__}: {exc})") from exc
    if len(slides) > MAX_SLIDES:
        raise ParseError(f"the pptx has more than {MAX_SLIDES} slides (the limit)")
    blocks = [block for number, slide in enumerate(slides, start=1) for block in _slide_blocks(slide, number)]
    title = presentation.core_properties.title or ""
    first_section = next((block.section for block in blocks if block.section), "")
    return ParsedDocument(blocks=blocks, title=title.strip() or first_section, page_count=len(slides))


def _slide_blocks(slide, number: int) -> list[Block]:
    title_shape = slide.shapes.title
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    section = title or f"Slide {number}"
    texts = [text for shape in slide.shapes if shape != title_shape for text in _shape_texts(shape, depth=0)]
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame
        if notes is not None and notes.text.strip():
            texts.append(NOTES_PREFIX + notes.text.strip())
    return [Block(text=text, section=section, page=number) for text in texts]


def _shape_texts(shape, *, depth: int) -> Iterator[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if depth > MAX_GROUP_DEPTH:
        raise ParseError(f"the pptx nests groups of shapes more than {MAX_GROUP_DEPTH} levels deep (the limit)")
    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        for member in shape.shapes:
            yield from _shape_texts(member, depth=depth + 1)
    elif shape.has_table:
        for row in shape.table.rows:
            cells = [" ".join(cell.text.split()) for cell in row.cells]
            if any(cells):
                yield CELL_SEPARATOR.join(cells)
    elif shape.has_text_frame:
        for paragraph in shape.text_frame.paragraphs:
            text = "".join(run.text for run in paragraph.runs).strip()
            if text:
                yield text
