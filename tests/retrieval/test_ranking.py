import pytest

from retrieval.ranking import (
    Correction,
    Fused,
    allowed_typos,
    apply_corrections,
    best_correction,
    correction_similarity,
    edit_distance,
    fuse,
    min_max,
    or_query,
    phrase_and_exclusion_filter,
    positive_text,
    uses_websearch_syntax,
    within_distance,
)


def test_min_max_places_a_list_between_its_worst_and_its_best():
    assert min_max([4.0, 2.0, 1.0]) == [1.0, pytest.approx(1 / 3), 0.0]
    assert min_max([3.0, 3.0]) == [1.0, 1.0]  # all as good as the best
    assert min_max([]) == []


def test_each_side_is_normalised_and_a_chunk_scores_their_mean():
    # Vector: distances 0.1, 0.3, 0.5 place chunks 1, 2, 3 at 1, 0.5, 0; lexical: 9, 5, 1 place
    # chunks 3, 4, 1 at 1, 0.5, 0. A side the chunk is missing from gives 0.
    fused = fuse([(1, 0.1), (2, 0.3), (3, 0.5)], [(3, 9.0), (4, 5.0), (1, 1.0)])
    assert [(f.chunk_id, f.score, f.vector_rank, f.fts_rank) for f in fused] == [
        (1, pytest.approx(0.5), 1, 3),  # a tie at 0.5: the better best rank, then the lower id
        (3, pytest.approx(0.5), 3, 1),
        (2, pytest.approx(0.25), 2, 0),
        (4, pytest.approx(0.25), 0, 2),
    ]


def test_the_best_chunk_of_both_sides_scores_one():
    fused = fuse([(7, 0.2), (8, 0.6)], [(7, 12.5), (8, 3.0)])
    assert (fused[0].chunk_id, fused[0].score) == (7, pytest.approx(1.0))
    assert all(0.0 <= f.score <= 1.0 for f in fused)


def test_weights_are_each_sides_share():
    fused = fuse([(1, 0.1), (2, 0.5)], [(2, 3.0), (1, 1.0)], vector_weight=3.0, lexical_weight=1.0)
    assert [(f.chunk_id, f.score) for f in fused] == [(1, pytest.approx(0.75)), (2, pytest.approx(0.25))]


def test_default_weights_are_equal_shares():
    vector, lexical = [(5, 0.1), (6, 0.4)], [(6, 2.0), (5, 1.0)]
    assert fuse(vector, lexical) == fuse(vector, lexical, vector_weight=1.0, lexical_weight=1.0)
    assert fuse(vector, lexical) == fuse(vector, lexical, vector_weight=2.5, lexical_weight=2.5)


def test_a_one_sided_search_scores_its_side_alone():
    assert [(f.chunk_id, f.score) for f in fuse([(1, 0.2), (2, 0.6)], [])] == [(1, 1.0), (2, 0.0)]
    assert [(f.chunk_id, f.score) for f in fuse([], [(4, 8.0), (3, 2.0)], lexical_weight=0.5)] == [(4, 1.0), (3, 0.0)]
    assert fuse([], []) == []


def test_a_side_whose_best_stands_far_above_the_rest_keeps_its_lead():
    # Chunk 2 is a close second by vector and far ahead by BM25. By ranks alone (1, 2 against 2, 1)
    # the two would tie and chunk 1 win on its better best rank; by scores chunk 2 leads.
    fused = fuse([(1, 0.30), (2, 0.31), (3, 0.80)], [(2, 10.0), (1, 2.0), (3, 1.0)])
    assert [f.chunk_id for f in fused] == [2, 1, 3]


def test_a_tie_goes_to_the_chunk_both_sides_found():
    # Chunk 1 is the vector side's best alone; chunk 2 the lexical side's best and the vector
    # side's last: both score 0.5, and the chunk with two witnesses goes first.
    fused = fuse([(1, 0.1), (2, 0.4)], [(2, 5.0), (3, 1.0)])
    assert [(f.chunk_id, f.score) for f in fused] == [(2, 0.5), (1, 0.5), (3, 0.0)]


def test_a_weight_of_zero_takes_the_side_out_of_the_score():
    fused = fuse([(1, 0.1), (2, 0.5)], [(2, 3.0), (1, 1.0)], vector_weight=0.0)
    assert [(f.chunk_id, f.score, f.vector_rank) for f in fused] == [(2, 1.0, 2), (1, 0.0, 1)]


def test_rrf_scores_the_seeds_reciprocal_ranks():
    # The seed's worked numbers: with 1:1 weights a chunk first on both sides scores 2/61; a side
    # the chunk is missing from adds nothing; only ranks count, not the sides' scores.
    fused = fuse([(1, 0.1), (2, 0.3), (3, 0.5)], [(1, 9.0), (4, 5.0)], rule="rrf")
    assert [(f.chunk_id, f.vector_rank, f.fts_rank) for f in fused] == [(1, 1, 1), (2, 2, 0), (4, 0, 2), (3, 3, 0)]
    score = {f.chunk_id: f.score for f in fused}
    assert score[1] == pytest.approx(2 / 61)
    assert score[2] == pytest.approx(1 / 62) and score[4] == pytest.approx(1 / 62) and score[3] == pytest.approx(1 / 63)


def test_rrf_weights_multiply_each_sides_reciprocal_rank():
    fused = fuse([(10, 0.1), (20, 0.2), (30, 0.3)], [(30, 9.0), (40, 1.0)], lexical_weight=2.0, rule="rrf")
    assert [(f.chunk_id, f.vector_rank, f.fts_rank) for f in fused] == [(30, 3, 1), (40, 0, 2), (10, 1, 0), (20, 2, 0)]
    score = {f.chunk_id: f.score for f in fused}
    assert score[30] == pytest.approx(1 / 63 + 2 / 61) and score[40] == pytest.approx(2 / 62)
    assert score[10] == pytest.approx(1 / 61)


def test_rrf_levels_a_side_whose_best_stands_far_above_the_rest():
    # The case score fusion wins (above): by ranks alone chunks 1 and 2 tie, and chunk 1 leads on
    # its better best rank, then the lower id.
    fused = fuse([(1, 0.30), (2, 0.31), (3, 0.80)], [(2, 10.0), (1, 2.0), (3, 1.0)], rule="rrf")
    assert [f.chunk_id for f in fused] == [1, 2, 3]
    assert fused[0].score == fused[1].score == pytest.approx(1 / 61 + 1 / 62)


def test_score_fusion_is_the_default_rule():
    vector, lexical = [(1, 0.2), (2, 0.6)], [(2, 4.0), (1, 1.0)]
    assert fuse(vector, lexical) == fuse(vector, lexical, rule="scores") != fuse(vector, lexical, rule="rrf")


def test_the_cut_off_runs_after_fusion_and_keeps_scores_and_ranks():
    fused = fuse([(1, 0.2), (2, 0.9)], [(3, 4.0), (1, 2.0)])
    kept = within_distance(fused, {1: 0.2, 2: 0.9, 3: 0.7}, max_distance=0.5)
    assert kept == [f for f in fused if f.chunk_id == 1]
    assert kept[0] == Fused(1, 0.5, 1, 2)


def test_a_cut_off_of_zero_is_off():
    fused = fuse([(1, 1.9), (2, 2.0)], [])
    assert within_distance(fused, {1: 1.9, 2: 2.0}, max_distance=0) == fused


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what is the return policy", "what OR is OR the OR return OR policy"),
        ("tea or coffee", "tea OR or OR coffee"),
        ('"return policy" refunds', '"return policy" refunds'),
        ("cats OR dogs", "cats OR dogs"),
        ("refunds -shipping", "refunds -shipping"),
        ("ERR-4521", "ERR-4521"),
    ],
)
def test_plain_queries_are_or_ed_and_websearch_syntax_passes_through(query, expected):
    assert or_query(query) == expected


def test_websearch_syntax_detection():
    assert uses_websearch_syntax('"exact phrase"')
    assert uses_websearch_syntax("a OR b")
    assert uses_websearch_syntax("-excluded word")
    assert uses_websearch_syntax("word -excluded")
    assert not uses_websearch_syntax("oregon orchards")
    assert not uses_websearch_syntax("well-known ERR-4521")


@pytest.mark.parametrize(
    "query",
    [
        "is it exact or approximate",  # a lower-case or is a word
        "Or is it approximate",
        "pressure -- and what follows",  # a dash between words
        "x- and y-axis",  # a hyphen after a word
        "- a list item",
        "values of-6 dB",
    ],
)
def test_natural_language_is_not_websearch_syntax(query):
    assert not uses_websearch_syntax(query)
    assert phrase_and_exclusion_filter(query) is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what is the speed of sound", None),
        ("exact or approximate methods", None),  # a plain question: "or" is just a word to BM25
        ('"return policy"-shipping', '"return policy"'),  # the hyphen does not start a word
        ('refunds -"heat transfer"', '-"heat transfer"'),
        ('"return policy" refunds -shipping', '"return policy" -shipping'),
        ("refunds -shipping -fees", "-shipping -fees"),
        ('say "" nothing', None),
    ],
)
def test_only_phrases_and_exclusions_restrict_bm25(query, expected):
    assert phrase_and_exclusion_filter(query) == expected


def test_positive_text_keeps_phrases_and_drops_exclusions_and_the_or_operator():
    assert positive_text('"return policy" refunds -shipping OR fees') == "return policy refunds fees"


def test_positive_text_keeps_a_lower_case_or_and_hyphens_within_words():
    assert positive_text("tea or coffee -- well-known x- brands") == "tea or coffee -- well-known x- brands"


@pytest.mark.parametrize(
    ("a", "b", "distance"), [("kitten", "sitting", 3), ("pasword", "password", 1), ("same", "same", 0), ("", "abc", 3)]
)
def test_edit_distance(a, b, distance):
    assert edit_distance(a, b, limit=5) == distance


def test_edit_distance_stops_past_the_limit():
    assert edit_distance("abcdefgh", "zyxwvuts", limit=2) == 3


@pytest.mark.parametrize(("word", "allowed"), [("cat", 0), ("tray", 1), ("printer", 1), ("printers", 2)])
def test_allowed_typos_by_length(word, allowed):
    assert allowed_typos(word) == allowed


def test_best_correction_prefers_distance_then_frequency_then_name():
    candidates = [("printers", 3), ("printer", 1), ("painter", 9)]
    assert best_correction("prnter", "prnter", candidates) == Correction("prnter", "printer", 1)
    assert best_correction("baning", "baning", [("banking", 2), ("banning", 5)]) == Correction("baning", "banning", 1)
    assert best_correction("aaaa", "aaaa", [("bbbb", 1)]) is None
    assert best_correction("cat", "cat", [("cats", 1)]) is None


def test_a_stemmed_word_is_compared_by_its_stem_within_what_both_lengths_allow():
    assert best_correction("polcy", "polci", [("polici", 4), ("police", 9)]) == Correction("polcy", "polici", 1)
    assert best_correction("hapiness", "hapi", [("happi", 3)]) == Correction("hapiness", "happi", 1)
    # Eight letters typed would allow two edits; the four-letter stem allows one.
    assert best_correction("hapiness", "hapi", [("hoppi", 3)]) is None
    assert best_correction("cats", "cat", [("cab", 1)]) is None


def test_corrections_replace_whole_words_case_insensitively():
    fixed = apply_corrections("Prnter tray prnterX", [Correction("prnter", "printer", 1)])
    assert fixed == "printer tray prnterX"


@pytest.mark.parametrize(
    ("lexeme", "edits", "threshold"),
    [
        ("prnter", 1, 0.36),  # 7 trigrams: (7 - 3) / (6 + 4 + 1) = 0.364
        ("printer", 1, 0.41),  # (8 - 3) / (7 + 5) = 0.417
        ("polic", 1, 0.29),  # (6 - 3) / (5 + 5) = 0.3 exactly: kept strictly below it
        ("tray", 1, 0.22),  # (5 - 3) / (4 + 5) = 0.222
        ("confgiuration", 2, 0.36),  # (14 - 6) / (13 + 9) = 0.364
        ("printers", 2, 0.2),  # (9 - 6) / (8 + 9) = 0.18: the floor
        ("aaaaaaaa", 2, 0.2),  # four distinct trigrams only
        ("café", 1, 0.2),  # not ASCII: where pg_trgm splits it depends on the locale
        ("re-run", 1, 0.2),
    ],
)
def test_correction_similarity_is_the_least_a_term_within_the_edits_can_have(lexeme, edits, threshold):
    assert correction_similarity(lexeme, edits) == threshold
