"""Entry point of the disposable child: PDF or image bytes on stdin, one JSON object on stdout.

What to read and how is in the CHILD_OPTIONS_VARIABLE environment variable (JSON):
{"format": "pdf" | "image", "ocr": {OcrOptions' fields} | null}.

Success: {"title": str, "pages": [[paragraph, ...], ...], "warnings": [str, ...], "ocr_pages": int};
a readable failure: {"error": str}. Whatever else happens (a crash, a signal, the parent's kill at
the deadline) is the parent's to report.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import sys

from .pdf_reader import PdfText, read_text_layer, with_ocr
from .types import CHILD_OPTIONS_VARIABLE, CPU_LIMIT_VARIABLE, OcrOptions, ParseError, progress_line

# A hostile file must not take the machine's memory, and a child orphaned by a killed worker
# must not parse forever: both are capped by the kernel, whatever the parent is doing.
MEMORY_LIMIT_BYTES = 2 * 1024**3
IMAGE_WITHOUT_OCR = "images are read only by OCR, which is off for this store"


def _limit_resources() -> None:
    cpu_seconds = int(os.environ.get(CPU_LIMIT_VARIABLE, "0"))
    if cpu_seconds > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def main() -> int:
    _limit_resources()
    # pdfminer logs a warning per oddity; a hostile file could fill the stderr pipe with them.
    logging.disable(logging.CRITICAL)
    options = json.loads(os.environ.get(CHILD_OPTIONS_VARIABLE) or "{}")
    ocr = OcrOptions(**options["ocr"]) if options.get("ocr") else None
    data = sys.stdin.buffer.read()
    try:
        text = _read_image(data, ocr) if options.get("format") == "image" else _read_pdf(data, options, ocr)
        result: dict[str, object] = {
            "title": text.title,
            "pages": text.pages,
            "warnings": text.warnings,
            "ocr_pages": text.ocr_pages,
        }
    except (ParseError, ParseDeadline) as exc:
        result = {"error": str(exc)}
    sys.stdout.write(json.dumps(result))
    return 0


class ParseDeadline(BaseException):
    """PDF_PARSE_TIMEOUT passed while the text layer was read. A BaseException: pdfminer's callers
    here wrap every Exception of a page in a reason of their own."""


def _read_pdf(data: bytes, options: dict, ocr: OcrOptions | None) -> PdfText:
    """The text layer within PDF_PARSE_TIMEOUT (the parent kills the child only later, when OCR
    has had its time too), then OCR of the scanned pages under OCR's own limits."""
    timeout = float(options.get("parse_timeout") or 0)

    def deadline_passed(signum, frame):
        raise ParseDeadline(f"PDF parsing took longer than {timeout:g}s (PDF_PARSE_TIMEOUT)")

    if timeout > 0:
        signal.signal(signal.SIGALRM, deadline_passed)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        layer = read_text_layer(data)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return with_ocr(data, layer, ocr, _report_page)


def _report_page(done: int, total: int) -> None:
    """Tells the parent how far OCR got (it reads stderr as the child runs)."""
    sys.stderr.write(progress_line(done, total))
    sys.stderr.flush()


def _read_image(data: bytes, ocr: OcrOptions | None) -> PdfText:
    if ocr is None:
        raise ParseError(IMAGE_WITHOUT_OCR)
    from .ocr import read_image

    result = read_image(data, ocr, _report_page)
    pages = [result.texts.get(number, []) for number in range(1, max(result.texts, default=0) + 1)]
    if not any(pages):
        reasons = "; ".join(result.warnings) or "OCR found no text in it"
        raise ParseError(f"the image has no readable text: {reasons}")
    return PdfText(title="", pages=pages, warnings=result.warnings, ocr_pages=len(result.texts))


if __name__ == "__main__":
    sys.exit(main())
