"""Entry point of the disposable PDF child: PDF bytes on stdin, one JSON object on stdout.

Success: {"title": str, "pages": [[paragraph, ...], ...]}; a readable failure: {"error": str}.
Whatever else happens (a crash, a signal, the parent's kill at the deadline) is the parent's to report.
"""

from __future__ import annotations

import json
import logging
import sys

from .pdf_reader import read_pdf
from .types import ParseError


def main() -> int:
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
