"""The pure parts of search compare: snippets, highlighted words and rank movements."""

from __future__ import annotations

from ragmux.dashboard.compare import hit_scores, rank_against, snippet
from retrieval.search import Hit


def hit(chunk_id: int, content: str = "text") -> Hit:
    return Hit(chunk_id, 1, "f.txt", 0, "", None, content, None, 0.0, 0, 0, "", [])


def test_query_words_are_marked_whole_and_without_case():
    pieces = snippet("Tide pools, tidepools and TIDE.", ["tide"])
    assert pieces == [("Tide", True), (" pools, tidepools and ", False), ("TIDE", True), (".", False)]


def test_a_snippet_is_a_window_around_the_first_query_word():
    text = "filler " * 100 + "the anemone closes " + "more " * 100
    pieces = snippet(text, ["anemone"])
    window = "".join(piece for piece, _ in pieces)
    assert window.startswith("…filler") and window.endswith("…")
    assert ("anemone", True) in pieces
    assert len(window) <= 322


def test_markup_stays_text_for_the_template_to_escape():
    assert snippet("<b>tide</b>", ["tide"]) == [("<b>", False), ("tide", True), ("</b>", False)]


def test_each_hit_knows_its_rank_in_the_other_list():
    ranked = rank_against([hit(1), hit(2), hit(3)], [hit(2), hit(1)], [], mode="hybrid")
    assert [(r.rank, r.other_rank, r.moved, r.movement) for r in ranked] == [
        (1, 2, True, "up 1"),
        (2, 1, True, "down 1"),
        (3, None, False, "only here"),
    ]


def test_a_hit_shows_only_the_scores_its_mode_has():
    scored = Hit(1, 1, "f.txt", 0, "", None, "text", 0.25, 0.0325, 2, 1, "", [], lex_score=4.5)
    assert hit_scores(scored, "hybrid") == [
        ("distance", "0.2500"),
        ("fused score", "0.03250"),
        ("vector_rank", "2"),
        ("fts_rank", "1"),
        ("lex_score", "4.500"),
    ]
    vector_only = Hit(1, 1, "f.txt", 0, "", None, "text", 0.25, 0.0164, 1, 0, "", [])
    assert hit_scores(vector_only, "vector") == [("distance", "0.2500"), ("vector_rank", "1")]
    lexical_only = Hit(1, 1, "f.txt", 0, "", None, "text", None, 0.0164, 0, 1, "", [], lex_score=4.5)
    assert hit_scores(lexical_only, "lexical") == [("fts_rank", "1"), ("lex_score", "4.500")]
