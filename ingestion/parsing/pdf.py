"""PDFs are parsed in a disposable child process: a parser crash, a runaway loop or a stack overflow
on untrusted bytes kills only that process, and the deadline is enforced by killing it.

subprocess rather than multiprocessing: Celery's prefork pool workers are daemonic and may not fork
multiprocessing children, and a fresh interpreter inherits nothing from the worker.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .types import (
    CHILD_OPTIONS_VARIABLE,
    CPU_LIMIT_VARIABLE,
    Block,
    OcrOptions,
    ParsedDocument,
    ParseError,
    ProgressCallback,
    parse_progress_line,
)

CHILD_COMMAND = (sys.executable, "-m", "ingestion.parsing.pdf_child")
# `python -m` resolves the child's module from its working directory: the one holding this `ingestion` package.
_IMPORT_ROOT = Path(__file__).resolve().parents[2]
_MAX_STDERR_DETAIL = 200
UNREADABLE_OUTPUT = "the PDF parser returned unreadable output"
# How often the wait for the child passes its progress on.
_PROGRESS_POLL_SECONDS = 1.0
_KEPT_STDERR_LINES = 20


def parse_pdf(
    data: bytes,
    *,
    timeout: float,
    ocr: OcrOptions | None = None,
    on_progress: ProgressCallback | None = None,
    command: Sequence[str] = CHILD_COMMAND,
) -> ParsedDocument:
    return _parse_in_child(data, "pdf", timeout=timeout, ocr=ocr, on_progress=on_progress, command=command)


def parse_image(
    data: bytes, *, timeout: float, ocr: OcrOptions | None, on_progress: ProgressCallback | None = None
) -> ParsedDocument:
    """Images (PNG, JPEG, TIFF, WebP) are read by OCR in the same child, under the same limits."""
    return _parse_in_child(data, "image", timeout=timeout, ocr=ocr, on_progress=on_progress, command=CHILD_COMMAND)


def _parse_in_child(
    data: bytes,
    file_format: str,
    *,
    timeout: float,
    ocr: OcrOptions | None,
    on_progress: ProgressCallback | None,
    command: Sequence[str],
) -> ParsedDocument:
    options = {"format": file_format, "parse_timeout": timeout, "ocr": dataclasses.asdict(ocr) if ocr else None}
    output = run_child(data, timeout=timeout, command=command, options=options, on_progress=on_progress)
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


def run_child(
    data: bytes,
    *,
    timeout: float,
    command: Sequence[str],
    options: dict | None = None,
    on_progress: ProgressCallback | None = None,
) -> bytes:
    """The child's stdout; it is always reaped, whatever interrupts the wait (a deadline, a Celery time limit…).

    The pages the child reports as read are passed to ``on_progress`` from this thread, while it waits."""
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
    streams = _ChildStreams(process, data)
    try:
        ends_at = time.monotonic() + deadline
        while process.poll() is None:
            left = ends_at - time.monotonic()
            if left <= 0:
                raise ParseError(_deadline_reason(timeout, deadline, ocr_on=bool(ocr)))
            try:
                process.wait(timeout=min(left, _PROGRESS_POLL_SECONDS))
            except subprocess.TimeoutExpired:
                streams.report(on_progress)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        streams.join()
    if process.returncode != 0:
        raise ParseError(_crash_reason(process.returncode, b"".join(streams.stderr_lines)))
    return streams.stdout


def _deadline_reason(timeout: float, deadline: float, *, ocr_on: bool) -> str:
    if ocr_on:
        return (
            f"parsing with OCR took longer than {deadline:g}s "
            "(PDF_PARSE_TIMEOUT plus OCR_PAGE_TIMEOUT for each of OCR_MAX_PAGES pages)"
        )
    return f"PDF parsing took longer than {timeout:g}s (PDF_PARSE_TIMEOUT)"


class _ChildStreams:
    """Feeds the child its input and reads its two outputs in threads of their own, so that the
    waiting thread is free to pass on the progress lines the child writes to stderr."""

    def __init__(self, process: subprocess.Popen, data: bytes) -> None:
        self._process = process
        self._data = data
        self.stdout = b""
        # The last lines only: the crash reason quotes the last one.
        self.stderr_lines: collections.deque[bytes] = collections.deque(maxlen=_KEPT_STDERR_LINES)
        self._progress: tuple[int, int] | None = None
        self._reported: tuple[int, int] | None = None
        targets = (self._feed, self._read_stdout, self._read_stderr)
        self._threads = [threading.Thread(target=target, daemon=True) for target in targets]
        for thread in self._threads:
            thread.start()

    def _feed(self) -> None:
        try:
            self._process.stdin.write(self._data)
        except OSError:  # the child exited (or was killed) before it read everything
            pass
        finally:
            try:
                self._process.stdin.close()
            except OSError:
                pass

    def _read_stdout(self) -> None:
        self.stdout = self._process.stdout.read()

    def _read_stderr(self) -> None:
        for line in self._process.stderr:
            progress = parse_progress_line(line)
            if progress is None:
                self.stderr_lines.append(line)
            else:
                self._progress = progress

    def report(self, on_progress: ProgressCallback | None) -> None:
        progress = self._progress
        if on_progress is not None and progress is not None and progress != self._reported:
            self._reported = progress
            on_progress(*progress)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()


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
