"""PDFs are parsed in a disposable child process: a parser crash, a runaway loop or a stack overflow
on untrusted bytes kills only that process, and the deadline is enforced by killing it.

subprocess rather than multiprocessing: Celery's prefork pool workers are daemonic and may not fork
multiprocessing children, and a fresh interpreter inherits nothing from the worker.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .types import CPU_LIMIT_VARIABLE, Block, ParsedDocument, ParseError

CHILD_COMMAND = (sys.executable, "-m", "ingestion.parsing.pdf_child")
# `python -m` resolves the child's module from its working directory: the one holding this `ingestion` package.
_IMPORT_ROOT = Path(__file__).resolve().parents[2]
_MAX_STDERR_DETAIL = 200
UNREADABLE_OUTPUT = "the PDF parser returned unreadable output"


def parse_pdf(data: bytes, *, timeout: float, command: Sequence[str] = CHILD_COMMAND) -> ParsedDocument:
    output = run_child(data, timeout=timeout, command=command)
    title, pages = _decode_output(output)
    blocks = [
        Block(text=paragraph, section="", page=number)
        for number, paragraphs in enumerate(pages, start=1)
        for paragraph in paragraphs
    ]
    return ParsedDocument(blocks=blocks, title=title, page_count=len(pages))


def run_child(data: bytes, *, timeout: float, command: Sequence[str]) -> bytes:
    """The child's stdout; it is always reaped, whatever interrupts the wait (a deadline, a Celery time limit…)."""
    env = {**os.environ, CPU_LIMIT_VARIABLE: str(math.ceil(timeout) + 5)}
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=_IMPORT_ROOT, env=env
    )
    try:
        stdout, stderr = process.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
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


def _decode_output(output: bytes) -> tuple[str, list[list[str]]]:
    try:
        result = json.loads(output)
    except (ValueError, RecursionError):
        raise ParseError(UNREADABLE_OUTPUT) from None
    if isinstance(result, dict) and isinstance(result.get("error"), str):
        raise ParseError(result["error"])
    if not _is_text_result(result):
        raise ParseError(UNREADABLE_OUTPUT)
    return result["title"], result["pages"]


def _is_text_result(result: object) -> bool:
    return (
        isinstance(result, dict)
        and isinstance(result.get("title"), str)
        and isinstance(result.get("pages"), list)
        and all(isinstance(page, list) and all(isinstance(text, str) for text in page) for page in result["pages"])
    )
