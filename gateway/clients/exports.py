"""The request log as CSV: one row per call, every ledger column, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from datetime import datetime

from rest_framework import serializers

from ragmux.core.units import micros_to_dollars

# A spreadsheet runs a cell that starts with one of these as a formula (a leading tab or
# carriage return can hide one), so such cells get a leading apostrophe.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_DATETIME = serializers.DateTimeField()


def cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, datetime):
        text = _DATETIME.to_representation(value)  # the same text as the JSON API's
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_pieces(columns: Iterable[str], batches: Iterable[list[tuple]]) -> Iterator[bytes]:
    """The header, then one piece of CSV per batch of rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> bytes:
        piece = buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()
        return piece

    writer.writerow(columns)
    yield flush()
    for batch in batches:
        writer.writerows([cell(value) for value in row] for row in batch)
        yield flush()


def with_dollars(batches: Iterable[list[tuple]], *, micros_at: int) -> Iterator[list[tuple]]:
    """Each row with its amount at ``micros_at`` (micro-dollars) appended in dollars, exactly
    ("0.0525"): what a spreadsheet sums."""
    for batch in batches:
        yield [(*row, micros_to_dollars(row[micros_at])) for row in batch]
