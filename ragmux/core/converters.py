"""URL converters shared by every app's routes."""

from __future__ import annotations


class IdConverter:
    """A row id: at most 18 digits, so it always fits PostgreSQL's bigint. A longer number
    cannot name a row and is simply not a match (a 404), never a database error."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)
