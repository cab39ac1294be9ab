"""An answer's ``[n]`` markers read back to the passages the context block labelled ``[n]``
(`retrieval.context.render_context` numbers them from 1, in the order of its sources). Pure: no
database, no network.

A marker is ``[1]``, ``[1, 2]`` (several passages at one place) or a run such as ``[1][3]``; a
number no passage carries (``[0]``, ``[7]`` of three passages, a year in brackets) is not a
citation, and neither is anything inside Markdown code (a ``[1]`` in ``xs[1]`` or in a fenced
block is an index, not a source). Indexes count characters (Unicode code points) of the answer,
the ``[`` of the marker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Up to four digits a number: a longer one is never one of a context's passages.
_MARKER = re.compile(r"\[[^\S\n]*(\d{1,4}(?:[^\S\n]*,[^\S\n]*\d{1,4})*)[^\S\n]*\]")
# Fenced blocks (to their closing fence, or the end of an answer cut short), then inline spans.
_CODE = re.compile(r"^[^\S\n]*(```|~~~).*?(?:^[^\S\n]*\1|\Z)|`[^`\n]+`", re.DOTALL | re.MULTILINE)
# What a citation says of its passage, from its sources entry (`retrieval.context.sources`).
CITED_FIELDS = ("document_id", "filename", "section", "page", "chunk_id")


@dataclass(frozen=True)
class Marker:
    """One passage cited at one place: its number (its ``[n]`` label) and the index of the
    marker's ``[`` in the answer."""

    number: int
    index: int


def _code_spans(answer: str) -> list[tuple[int, int]]:
    return [match.span() for match in _CODE.finditer(answer)] if "`" in answer or "~~~" in answer else []


def markers(answer: str, count: int) -> list[Marker]:
    """Every citation of one of ``count`` passages in ``answer``, in the order written (``[1, 2]``
    is two, at the same index; a number repeated inside one marker counts once)."""
    if "[" not in answer or count <= 0:
        return []
    code = _code_spans(answer)
    found: list[Marker] = []
    for match in _MARKER.finditer(answer):
        index = match.start()
        if any(start <= index < end for start, end in code):
            continue
        numbers = dict.fromkeys(int(number) for number in match.group(1).split(","))
        found += [Marker(number, index) for number in numbers if 1 <= number <= count]
    return found


def citations(answer: str, sources: Sequence[dict]) -> list[dict]:
    """One entry per passage ``answer`` cites, in the order first cited: its ``marker``, what its
    ``sources`` entry says of it (document, file name, section, page, chunk) and the ``index`` of
    its first citation. ``sources`` are the context's, in prompt order."""
    first: dict[int, int] = {}
    for marker in markers(answer, len(sources)):
        first.setdefault(marker.number, marker.index)
    return [
        {
            "marker": number,
            **{name: sources[number - 1].get(name) for name in CITED_FIELDS},
            "index": index,
        }
        for number, index in first.items()
    ]
