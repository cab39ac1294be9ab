"""The quality bench's own arithmetic: the whole-document reference and the naive baselines (the metrics and
the paired comparison are the product's: tests/retrieval/evaluation/test_metrics.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from quality import (  # noqa: E402  (the bench folder is not a package)
    DISTINCT_WORDS,
    REFERENCE_FUSED,
    REFERENCE_LEXICAL,
    STEMMED,
    naive_rankings,
    naive_whole_documents,
    naive_windows,
    reference_dense_rankings,
    reference_rankings,
)

CORPUS = [
    {"_id": "d1", "title": "", "text": "alpha beta"},
    {"_id": "d2", "title": "", "text": "alpha alpha gamma"},
    {"_id": "empty", "title": "", "text": "  "},
    {"_id": "d4", "title": "Delta", "text": "epsilon"},
]


def embed_by_keyword(texts):
    """Documents about delta point one way, everything else the other."""
    return [[1.0, 0.0] if "delta" in text.lower() else [0.0, 3.0] for text in texts]


def test_reference_rankings_are_bm25_dense_and_their_fusion_over_whole_documents():
    dense = reference_dense_rankings(CORPUS, {"q1": [2.0, 0.0], "q2": [0.0, 1.0]}, embed_by_keyword)
    rankings = reference_rankings(CORPUS, {"q1": "Alpha", "q2": "delta"}, dense)

    # BM25 (k1 1.2, b 0.75): d2 has "alpha" twice in three words and beats d1 (once in two);
    # documents without the word are not ranked at all. The title counts as text ("Delta").
    assert rankings[REFERENCE_LEXICAL] == {"q1": ["d2", "d1"], "q2": ["d4"]}
    # Exact cosine, ties broken by corpus order.
    assert dense == {"q1": ["d4", "d1", "d2"], "q2": ["d1", "d2", "d4"]}
    # RRF k 60: d2 1/61 + 1/63 edges out d1 2/62; d4 has its dense rank alone.
    assert rankings[REFERENCE_FUSED]["q1"] == ["d2", "d1", "d4"]
    assert rankings[REFERENCE_FUSED]["q2"] == ["d4", "d1", "d2"]


def test_reference_rankings_never_retrieve_an_empty_document():
    dense = reference_dense_rankings(CORPUS, {"q": [0.0, 1.0]}, embed_by_keyword)
    rankings = reference_rankings(CORPUS, {"q": "alpha"}, dense)

    assert all("empty" not in ranked for by_query in [dense, *rankings.values()] for ranked in by_query.values())


def test_the_stemmed_reference_matches_word_forms_and_drops_stop_words():
    corpus = [
        {"_id": "plural", "title": "", "text": "the refund policies"},
        {"_id": "other", "title": "", "text": "the garden"},
    ]
    dense = {"q": ["other", "plural"]}
    plain = reference_rankings(corpus, {"q": "the policy"}, dense)
    stemmed = reference_rankings(corpus, {"q": "the policy"}, dense, stemmed=True)

    # Unstemmed, "policy" matches nothing and "the" alone ranks, the shorter document first.
    assert plain[REFERENCE_LEXICAL]["q"] == ["other", "plural"]
    assert stemmed[REFERENCE_LEXICAL + STEMMED]["q"] == ["plural"]  # "polici"; "the" is a stop word


def test_naive_windows_overlap_and_stop_at_the_end():
    text = "w" * 2500
    windows = naive_windows([{"_id": "long", "title": "", "text": text}, {"_id": "blank", "title": " ", "text": ""}])

    # "\n" + 2500 characters: windows start every 800 characters, the last one reaching the end.
    assert [(source, len(window)) for source, window in windows] == [("long", 1000), ("long", 1000), ("long", 901)]


def test_naive_rankings_use_lowercase_word_runs_and_rank_documents_at_their_best_unit():
    corpus = [
        {"_id": "compound", "title": "Heat-Transfer", "text": "rates of heat-transfer"},
        {"_id": "split", "title": "", "text": "heat and mass transfer in slabs of many other words"},
    ]
    units = naive_whole_documents(corpus) + [("split", "nothing relevant")]

    assert naive_rankings(units, {"q": "HEAT transfer"}) == {"q": ["compound", "split"]}


def test_the_reference_counts_a_repeated_query_word_each_time_unless_told_distinct():
    # "alpha" and "beta" have the same statistics: asked once each, their documents tie (corpus
    # order); "alpha" asked twice puts its document first.
    corpus = [
        {"_id": "beta", "title": "", "text": "beta one"},
        {"_id": "alpha", "title": "", "text": "alpha two"},
        {"_id": "other", "title": "", "text": "three four"},
    ]
    dense = {"q": ["other", "beta", "alpha"]}
    repeated = reference_rankings(corpus, {"q": "alpha beta alpha"}, dense)
    distinct = reference_rankings(corpus, {"q": "alpha beta alpha"}, dense, distinct=True)

    assert repeated[REFERENCE_LEXICAL]["q"] == ["alpha", "beta"]
    assert distinct[REFERENCE_LEXICAL + DISTINCT_WORDS]["q"] == ["beta", "alpha"]


def test_reference_embeddings_come_from_the_cache_once_made(tmp_path):
    cache = tmp_path / "reference.npz"
    embedded: list[str] = []

    def counting(texts):
        embedded.extend(texts)
        return embed_by_keyword(texts)

    first = reference_dense_rankings(CORPUS, {"q": [1.0, 0.0]}, counting, cache)
    assert len(embedded) == 3 and cache.is_file()  # the empty document is never embedded
    again = reference_dense_rankings(CORPUS, {"q": [1.0, 0.0]}, counting, cache)
    assert again == first and len(embedded) == 3
    more = [*CORPUS, {"_id": "d5", "title": "", "text": "zeta"}]
    reference_dense_rankings(more, {"q": [1.0, 0.0]}, counting, cache)
    assert embedded[3:] == ["zeta"]  # only what the cache lacks
