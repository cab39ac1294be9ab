"""OCR with Tesseract (Debian's `tesseract-ocr`, its models in `tesseract-ocr-<lang>`), run only
inside the disposable PDF child (pdf_child): pages of PDFs without a text layer, and images.

Tesseract was chosen over RapidOCR on real scans (docs/benchmarks.md, issue 45): word recall
0.99 against 0.36, six times the pages per CPU second and a fourteenth of the memory.

Every page is bounded: pixels (a larger image is refused before it is decoded), time (the
tesseract process is killed at OCR_PAGE_TIMEOUT and the page skipped with a warning) and the
number of pages read by OCR per document.
"""

from __future__ import annotations

import io
import subprocess
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pypdfium2
from PIL import Image, UnidentifiedImageError

from .text import paragraphs
from .types import OcrOptions, ParseError, ProgressCallback

# The resolution PDF pages are rendered at for OCR: the least Tesseract's documentation asks
# for. On the bench's scans (docs/benchmarks.md, issue 45) 200 dpi read as many words for less
# CPU; 300 is kept for print smaller than that corpus's.
PDF_RENDER_DPI = 300
TESSERACT = "tesseract"
_MAX_DETAIL = 200


@dataclass(frozen=True)
class OcrPages:
    """Paragraphs per page number (pages that failed are absent), and why the others failed."""

    texts: dict[int, list[str]]
    warnings: list[str]


class PageFailed(Exception):
    """One page could not be read by OCR; the others carry on."""


def read_pages(
    numbers: list[int], load: Callable[[int], Image.Image], options: OcrOptions, on_page: ProgressCallback | None
) -> OcrPages:
    """OCRs the pages ``load`` gives for ``numbers``, at most OCR_MAX_PAGES of them, telling
    ``on_page`` how many are done; a page that fails is skipped with its number in a warning."""
    texts, failures = {}, []
    chosen = numbers[: options.max_pages]
    for done, number in enumerate(chosen):
        if on_page is not None:
            on_page(done, len(chosen))
        try:
            texts[number] = _page_paragraphs(load(number), options)
        except PageFailed as exc:
            failures.append(f"page {number} was skipped: {exc}")
    if on_page is not None:
        on_page(len(chosen), len(chosen))
    if len(numbers) > options.max_pages:
        skipped = numbers[options.max_pages :]
        failures.append(
            f"{_pages(skipped)} not read: OCR reads at most {options.max_pages} pages per document (OCR_MAX_PAGES)"
        )
    return OcrPages(texts=texts, warnings=failures)


def _pages(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"page {numbers[0]} was"
    return f"pages {numbers[0]}–{numbers[-1]} ({len(numbers)} pages) were"


def _page_paragraphs(image, options: OcrOptions) -> list[str]:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    command = [TESSERACT, "stdin", "stdout", "-l", options.language]
    dpi = image.info.get("dpi")
    if dpi and dpi[0] >= 1:
        command += ["--dpi", str(round(dpi[0]))]
    try:
        # One thread: the worker's processes share the machine's cores already.
        result = subprocess.run(
            command,
            input=buffer.getvalue(),
            capture_output=True,
            timeout=options.page_timeout,
            env={"OMP_THREAD_LIMIT": "1", "PATH": "/usr/bin:/bin:/usr/local/bin"},
        )
    except subprocess.TimeoutExpired:
        raise PageFailed(f"OCR took longer than {options.page_timeout:g}s (OCR_PAGE_TIMEOUT)") from None
    except FileNotFoundError:
        raise ParseError("OCR is not installed on this server (Debian package tesseract-ocr)") from None
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
        message = detail[-1][:_MAX_DETAIL] if detail else f"exit status {result.returncode}"
        if "Failed loading language" in result.stderr.decode("utf-8", errors="replace"):
            raise ParseError(f'the OCR language "{options.language}" is not installed on this server')
        raise PageFailed(f"OCR failed ({message})")
    text = result.stdout.decode("utf-8", errors="replace").replace("\x00", "")
    # Tesseract ends its lines where the scan's did: within a paragraph they are not the author's.
    return [" ".join(paragraph.split()) for paragraph in paragraphs(text)]


def read_image(data: bytes, options: OcrOptions, on_page: ProgressCallback | None = None) -> OcrPages:
    """An image file's frames (a multi-page TIFF has several) as pages, each checked against the
    pixel limit before it is decoded."""
    Image.MAX_IMAGE_PIXELS = options.max_pixels
    try:
        with warnings.catch_warnings():
            # PIL only warns between the limit and twice the limit; here the limit is the limit.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ParseError(_too_many_pixels(options)) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ParseError(f"the file is not a readable image ({_detail(exc)})") from exc

    def load(number: int) -> Image.Image:
        try:
            image.seek(number - 1)
            width, height = image.size
            if width * height > options.max_pixels:
                raise PageFailed(_too_many_pixels(options, f"{width}×{height}"))
            grey = image.convert("L")
        except (OSError, ValueError, SyntaxError, EOFError) as exc:
            raise PageFailed(f"the image cannot be decoded ({_detail(exc)})") from exc
        grey.info["dpi"] = image.info.get("dpi")
        return grey

    return read_pages(list(range(1, getattr(image, "n_frames", 1) + 1)), load, options, on_page)


def _too_many_pixels(options: OcrOptions, what: str = "") -> str:
    size = f" ({what})" if what else ""
    return (
        f"the image has more than {options.max_pixels} pixels{size}, the limit (OCR_MAX_PIXELS); "
        "it is refused as a possible decompression bomb"
    )


def read_pdf_pages(
    data: bytes, numbers: list[int], options: OcrOptions, on_page: ProgressCallback | None = None
) -> OcrPages:
    """The given pages of a PDF rendered grey at PDF_RENDER_DPI (lower where a page is so large
    that it would pass the pixel limit), and read."""
    try:
        document = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        raise ParseError(f"the PDF cannot be rendered for OCR ({_detail(exc)})") from exc

    def load(number: int) -> Image.Image:
        try:
            page = document[number - 1]
            width, height = page.get_size()
            scale = min(PDF_RENDER_DPI / 72, (options.max_pixels / max(width * height, 1)) ** 0.5)
            image = page.render(scale=scale, grayscale=True).to_pil()
        except pypdfium2.PdfiumError as exc:
            raise PageFailed(f"it cannot be rendered ({_detail(exc)})") from exc
        image.info["dpi"] = (scale * 72, scale * 72)
        return image

    try:
        return read_pages(numbers, load, options, on_page)
    finally:
        document.close()


def _detail(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:_MAX_DETAIL]
