"""PDFs are parsed in a disposable child process: a parser crash, a runaway loop or a stack overflow
on untrusted bytes kills only that process, and the deadline is enforced by killing it.

subprocess rather than multiprocessing: Celery's prefork pool workers are daemonic and may not fork
multiprocessing children, and a fresh interpreter inherits nothing from the worker.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .types import CHILD_OPTIONS_VARIABLE, CPU_LIMIT_VARIABLE, Block, OcrOptions, ParsedDocument, ParseError

CHILD_COMMAND = (sys.executable, "-m", "ingestion.parsing.pdf_child")
# `python -m` resolves the child's module from its working directory: the one holding this `ingestion` package.
_IMPORT_ROOT = Path(__file__).resolve().parents[2]
_MAX_STDERR_DETAIL = 200
UNREADABLE_OUTPUT = "the PDF parser returned unreadable output"


def parse_pdf(
    data: bytes, *, timeout: float, ocr: OcrOptions | None = None, command: Sequence[str] = CHILD_COMMAND
) -> ParsedDocument:
    return _parse_in_child(data, "pdf", timeout=timeout, ocr=ocr, command=command)


def parse_image(data: bytes, *, timeout: float, ocr: OcrOptions | None) -> ParsedDocument:
    """Images (PNG, JPEG, TIFF, WebP) are read by OCR in the same child, under the same limits."""
    return _parse_in_child(data, "image", timeout=timeout, ocr=ocr, command=CHILD_COMMAND)


def _parse_in_child(
    data: bytes, file_format: str, *, timeout: float, ocr: OcrOptions | None, command: Sequence[str]
) -> ParsedDocument:
    options = {"format": file_format, "ocr": dataclasses.asdict(ocr) if ocr else None}
    output = run_child(data, timeout=timeout, command=command, options=options)
    result = _decode_output(output)
    pages = result["pages"]
    blocks = [
        Block(text=paragraph, section="", page=number)
        for number, paragraphs in enumerate(pages, start=1)
        for paragraph in paragraphs
    ]
    return ParsedDocument(
        blocks=blocks,
        title=result["title"],
        page_count=len(pages),
        warnings=tuple(result.get("warnings", ())),
        ocr_pages=result.get("ocr_pages", 0),
    )


def child_timeout(pdf_timeout: float, ocr: OcrOptions | None) -> float:
    """The child's deadline: PDF_PARSE_TIMEOUT, plus OCR_PAGE_TIMEOUT for each page OCR may read."""
    return pdf_timeout + (ocr.max_pages * ocr.page_timeout if ocr else 0)


def run_child(data: bytes, *, timeout: float, command: Sequence[str], options: dict | None = None) -> bytes:
    """The child's stdout; it is always reaped, whatever interrupts the wait (a deadline, a Celery time limit…)."""
    ocr = options.get("ocr") if options else None
    deadline = child_timeout(timeout, OcrOptions(**ocr) if ocr else None)
    env = {
        **os.environ,
        CPU_LIMIT_VARIABLE: str(math.ceil(deadline) + 5),
        CHILD_OPTIONS_VARIABLE: json.dumps(options or {}),
    }
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=_IMPORT_ROOT, env=env
    )
    try:
        stdout, stderr = process.communicate(data, timeout=deadline)
    except subprocess.TimeoutExpired:
        if ocr:
            raise ParseError(
                f"parsing with OCR took longer than {deadline:g}s "
                "(PDF_PARSE_TIMEOUT plus OCR_PAGE_TIMEOUT for each of OCR_MAX_PAGES pages)"
            ) from None
        raise ParseError(f"PDF parsing took longer than {timeout:g}s (PDF_PARSE_TIMEOUT)") from None
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    if process.returncode != 0:
        raise ParseError(_crash_reason(process.returncode, stderr))
    return stdout


def _crash_reason(returncode: int, stderr: bytes) -> str:
    if returncode < 0:
        return f"the PDF parser was killed by signal {_signal_name(-returncode)}"
    lines = stderr.decode("utf-8", errors="replace").strip().splitlines()
    detail = f": {lines[-1][:_MAX_STDERR_DETAIL]}" if lines else ""
    return f"the PDF parser crashed (exit status {returncode}{detail})"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _decode_output(output: bytes) -> dict:
    try:
        result = json.loads(output)
    except (ValueError, RecursionError):
        raise ParseError(UNREADABLE_OUTPUT) from None
    if isinstance(result, dict) and isinstance(result.get("error"), str):
        raise ParseError(result["error"])
    if not _is_text_result(result):
        raise ParseError(UNREADABLE_OUTPUT)
    return result


def _is_text_result(result: object) -> bool:
    return (
        isinstance(result, dict)
        and isinstance(result.get("title"), str)
        and _is_list_of(result.get("pages"), lambda page: _is_list_of(page, lambda text: isinstance(text, str)))
        and _is_list_of(result.get("warnings", []), lambda text: isinstance(text, str))
        and type(result.get("ocr_pages", 0)) is int
    )


def _is_list_of(value: object, check) -> bool:
    return isinstance(value, list) and all(check(item) for item in value)
