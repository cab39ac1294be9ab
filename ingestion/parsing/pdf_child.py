"""Entry point of the disposable PDF child: PDF bytes on stdin, one JSON object on stdout.

Success: {"title": str, "pages": [[paragraph, ...], ...]}; a readable failure: {"error": str}.
Whatever else happens (a crash, a signal, the parent's kill at the deadline) is the parent's to report.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys

from .pdf_reader import read_pdf
from .types import CPU_LIMIT_VARIABLE, ParseError

# A hostile file must not take the machine's memory, and a child orphaned by a killed worker
# must not parse forever: both are capped by the kernel, whatever the parent is doing.
MEMORY_LIMIT_BYTES = 2 * 1024**3


def _limit_resources() -> None:
    cpu_seconds = int(os.environ.get(CPU_LIMIT_VARIABLE, "0"))
    if cpu_seconds > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def main() -> int:
    _limit_resources()
    # pdfminer logs a warning per oddity; a hostile file could fill the stderr pipe with them.
    logging.disable(logging.CRITICAL)
    data = sys.stdin.buffer.read()
    try:
        text = read_pdf(data)
        result: dict[str, object] = {"title": text.title, "pages": text.pages}
    except ParseError as exc:
        result = {"error": str(exc)}
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
