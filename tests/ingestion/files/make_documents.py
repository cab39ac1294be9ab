"""Builders of the office files, e-books, e-mails, scans and images the format and OCR tests
read, made with the libraries that write them for real (python-pptx, openpyxl, ebooklib, the
standard library's `email`, msoffcrypto-tool, pdfium and Pillow) rather than committed."""

from __future__ import annotations

import io
import struct
import zlib
from email.message import EmailMessage

import openpyxl
import pptx
import pypdfium2
from ebooklib import epub
from msoffcrypto.format.ooxml import OOXMLFile
from PIL import Image, ImageDraw, ImageFont
from pptx.util import Inches

from tests.ingestion.files.make_hostile import text_pdf


def slides_pptx() -> bytes:
    """A titled slide with a body, a table and speaker notes; an untitled slide with a group."""
    presentation = pptx.Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])
    first.shapes.title.text = "Quarterly budget"
    first.placeholders[1].text = "Spending rose in the north\nThe south held steady"
    table = first.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    for (row, column), text in {(0, 0): "Region", (0, 1): "Total", (1, 0): "North", (1, 1): "12"}.items():
        table.cell(row, column).text = text
    first.notes_slide.notes_text_frame.text = "Mention the new depot before the numbers."
    second = presentation.slides.add_slide(presentation.slide_layouts[6])
    group = second.shapes.add_group_shape()
    group.shapes.add_textbox(0, 0, Inches(3), Inches(1)).text_frame.text = "Questions welcome"
    return _saved(presentation)


def workbook_xlsx() -> bytes:
    """A sheet whose header has a cell merged across two columns, and a hidden sheet."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Budget"
    sheet.append(["Region", "First half", None, "Owner"])
    sheet.merge_cells("B1:C1")
    sheet.append(["North", 3, 4, "Ada"])
    sheet.append(["South", 5.0, 6.5, None])
    hidden = workbook.create_sheet("Rates")
    hidden.append(["secret rate", 0.07])
    hidden.sheet_state = "hidden"
    workbook.create_sheet("Empty")
    return _saved(workbook)


def encrypted_xlsx() -> bytes:
    """A workbook saved with a password, as Excel writes it: an OLE compound file."""
    encrypted = io.BytesIO()
    OOXMLFile(io.BytesIO(workbook_xlsx())).encrypt("secret", encrypted)
    return encrypted.getvalue()


def book_epub(*, images_only: bool = False) -> bytes:
    book = epub.EpubBook()
    book.set_identifier("field-guide")
    book.set_title("A Field Guide to the Shore")
    book.set_language("en")
    if images_only:
        picture = epub.EpubItem(uid="plate", file_name="plate.png", media_type="image/png", content=png_of_text("x"))
        book.add_item(picture)
        chapters = [_chapter(f"plate{n}.xhtml", '<p><img src="plate.png" alt=""/></p>') for n in (1, 2)]
    else:
        chapters = [
            _chapter(
                "pools.xhtml",
                "<h1>Rock pools</h1><p>Anemones close at low tide.</p><h2>Crabs</h2><p>Hermit crabs swap shells.</p>",
            ),
            _chapter("birds.xhtml", "<p>Oystercatchers probe the wet sand.</p>"),
        ]
    for chapter in chapters:
        book.add_item(chapter)
    book.toc = chapters
    book.spine = ["nav", *chapters]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    output = io.BytesIO()
    epub.write_epub(output, book)
    return output.getvalue()


def _chapter(name: str, body: str) -> epub.EpubHtml:
    chapter = epub.EpubHtml(title=name, file_name=name, lang="en")
    chapter.content = body
    return chapter


def nested_eml() -> bytes:
    """multipart/mixed: an alternative (plain and HTML) body, a CSV attachment, an unsupported
    attachment, and a forwarded message (message/rfc822) carrying an attachment of its own."""
    forwarded = EmailMessage()
    forwarded["From"] = "Grace <grace@example.org>"
    forwarded["Subject"] = "Depot keys"
    forwarded.set_content("The depot keys are with the night porter.")
    forwarded.add_attachment(
        b"Spare keys hang in cabinet seven.", maintype="text", subtype="plain", filename="keys.txt"
    )
    message = EmailMessage()
    message["From"] = "Ada <ada@example.org>"
    message["To"] = "team@example.org"
    message["Date"] = "Mon, 07 Dec 2026 09:00:00 +0000"
    message["Subject"] = "Budget and keys"
    message.set_content("Here is the budget.\n\nSee the forwarded note about the keys.")
    message.add_alternative(
        "<p>Here is the <b>budget</b>.</p><p>See the forwarded note about the keys.</p>", subtype="html"
    )
    message.add_attachment(b"region,total\nNorth,12\n", maintype="text", subtype="csv", filename="budget.csv")
    message.add_attachment(b"\x00\x01binary", maintype="application", subtype="octet-stream", filename="tool.exe")
    message.add_attachment(forwarded)
    return bytes(message)


def png_of_text(text: str, *, size: int = 40) -> bytes:
    return _image_bytes([_text_image(text, size=size)], "PNG")


def image_of_text(text: str, image_format: str) -> bytes:
    return _image_bytes([_text_image(text, size=40)], image_format)


def tiff_pages(texts: list[str]) -> bytes:
    return _image_bytes([_text_image(text, size=40) for text in texts], "TIFF")


def _text_image(text: str, *, size: int) -> Image.Image:
    font = ImageFont.load_default(size=size)
    lines = text.splitlines()
    image = Image.new("L", (1400, 120 + 70 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        draw.text((60, 60 + 70 * number), line, fill=0, font=font)
    return image


def _image_bytes(images: list[Image.Image], image_format: str) -> bytes:
    output = io.BytesIO()
    images[0].save(output, image_format, save_all=len(images) > 1, append_images=images[1:], dpi=(300, 300))
    return output.getvalue()


def scanned_pdf_of(pages: list[list[str]], *, dpi: int = 300, keep_text: tuple[int, ...] = ()) -> bytes:
    """A PDF whose pages are scans (images, no text layer) of text pages, one paragraph per line
    of ``pages``; the page numbers in ``keep_text`` keep their text layer instead (a mixed PDF)."""
    source = pypdfium2.PdfDocument(text_pdf([[[line] for line in page] for page in pages]))
    output = pypdfium2.PdfDocument.new()
    for index in range(len(source)):
        if index + 1 in keep_text:
            output.import_pages(source, [index])
            continue
        image = source[index].render(scale=dpi / 72, grayscale=True).to_pil()
        scan = pypdfium2.PdfDocument(_pdf_of_image(image, dpi))
        output.import_pages(scan)
    buffer = io.BytesIO()
    output.save(buffer)
    return buffer.getvalue()


def _pdf_of_image(image: Image.Image, dpi: int) -> bytes:
    output = io.BytesIO()
    image.save(output, "PDF", resolution=dpi)
    return output.getvalue()


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG whose header claims width × height pixels over a few bytes of data: decoding it would
    take ``width * height`` bytes of memory."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 1024))
        + chunk(b"IEND", b"")
    )


def _saved(document) -> bytes:
    output = io.BytesIO()
    document.save(output)
    return output.getvalue()
