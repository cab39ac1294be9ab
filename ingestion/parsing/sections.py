"""The heading stack every structured format keeps, and the section path it shows."""

from __future__ import annotations

Headings = tuple[tuple[int, str], ...]

SECTION_SEPARATOR = " > "


def with_heading(headings: Headings, level: int, title: str) -> Headings:
    """A heading closes every open heading of its own level or deeper."""
    return tuple(heading for heading in headings if heading[0] < level) + ((level, title),)


def section_path(headings: Headings) -> str:
    """Only the two innermost headings: enough context for a chunk, short enough to embed with it."""
    return SECTION_SEPARATOR.join(title for _, title in headings[-2:])
