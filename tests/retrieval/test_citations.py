from dataclasses import dataclass

import pytest

from retrieval.citations import Marker, citations, markers
from retrieval.context import render_context, sources


@dataclass
class Passage:
    chunk_id: int
    document_id: int
    filename: str
    section: str = ""
    page: int | None = None
    content: str = "text"
    score: float = 0.5


PASSAGES = [
    Passage(chunk_id=11, document_id=1, filename="handbook.pdf", section="Leave", page=4),
    Passage(chunk_id=12, document_id=1, filename="handbook.pdf", page=5),
    Passage(chunk_id=30, document_id=2, filename="faq.md", section="Refunds"),
]
SOURCES = sources(PASSAGES)


def test_markers_name_passages_where_they_are_written():
    answer = "Leave is 20 days [1]. Refunds take a week [3]."
    assert markers(answer, 3) == [Marker(1, answer.index("[1]")), Marker(3, answer.index("[3]"))]


@pytest.mark.parametrize(
    ("answer", "numbers"),
    [
        ("both [1, 2].", [1, 2]),
        ("both [1,2] and [ 3 ].", [1, 2, 3]),
        ("a run [1][3].", [1, 3]),
        ("repeated [2, 2].", [2]),
        ("none of ours [0] [4] [12345] [2026].", []),
        ("in part [1, 9].", [1]),
        ("not a marker [a] [1.5] [-1] [] [1\n].", []),
    ],
)
def test_marker_forms(answer, numbers):
    assert [marker.number for marker in markers(answer, 3)] == numbers


def test_a_list_marker_cites_every_number_at_its_own_index():
    answer = "Both say so [1, 3]."
    assert markers(answer, 3) == [Marker(1, 12), Marker(3, 12)]


def test_markers_inside_code_are_not_citations():
    answer = "Use `xs[1]` here [2].\n```python\nys[3] = 1\n```\nAfter the block [3].\n```\nzs[1] (cut short)"
    assert [(m.number, answer[m.index : m.index + 3]) for m in markers(answer, 3)] == [(2, "[2]"), (3, "[3]")]


def test_indexes_count_characters_not_bytes():
    answer = "Été: vacances [1]"
    assert markers(answer, 1) == [Marker(1, len("Été: vacances "))]


def test_no_sources_no_markers():
    assert markers("see [1]", 0) == [] and citations("see [1]", []) == []


def test_citations_are_the_passages_cited_once_each_in_first_cited_order():
    answer = "Refunds [3]. Leave [1]. Leave again [1, 3]."
    assert citations(answer, SOURCES) == [
        {
            "marker": 3,
            "document_id": 2,
            "filename": "faq.md",
            "section": "Refunds",
            "page": 0,
            "chunk_id": 30,
            "index": answer.index("[3]"),
        },
        {
            "marker": 1,
            "document_id": 1,
            "filename": "handbook.pdf",
            "section": "Leave",
            "page": 4,
            "chunk_id": 11,
            "index": answer.index("[1]"),
        },
    ]
    assert citations("Nothing cited.", SOURCES) == []


def test_the_marker_is_the_label_the_context_block_gave_the_passage():
    block = render_context(PASSAGES)
    for citation in citations("[1] [2] [3]", SOURCES):
        label = f"[{citation['marker']}] ({citation['filename']}"
        assert label in block
        assert SOURCES[citation["marker"] - 1]["chunk_id"] == citation["chunk_id"]
