"""The engine's scores (retrieval.evaluation.scores) against values worked out by hand on a tiny
BEIR set (no database)."""

import math

import pytest

from retrieval.evaluation.beir import parse_qrels
from retrieval.evaluation.scores import (
    Difference,
    Summary,
    collapse_to_documents,
    describe,
    hit,
    ndcg,
    paired_bootstrap,
    percentile,
    recall,
    reciprocal_rank,
    score_question,
    summarise,
)

# Three questions: q1 with a graded pair (d1 very relevant, d3 somewhat; d4 judged not relevant),
# q2 with one answer, q3 whose answer never comes back.
QRELS = parse_qrels("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t1\nq1\td4\t0\nq2\td2\t1\nq3\td5\t1\n")
RANKINGS = {"q1": ["d2", "d1", "d4", "d3"], "q2": ["d2", "d1"], "q3": ["d1", "d2"]}
LATENCIES = {"q1": 10.0, "q2": 20.0, "q3": 40.0}


def test_chunks_collapse_to_documents_at_their_best_chunk():
    assert collapse_to_documents(["d2", "d1", "d2", "d3", "d1"]) == ["d2", "d1", "d3"]


def test_ndcg_uses_graded_gains_a_log2_discount_and_the_ideal_order_of_every_judged_document():
    # DCG: d1 (gain 2) at rank 2, d3 (gain 1) at rank 4; ideal: 2 at rank 1, 1 at rank 2.
    expected = (2 / math.log2(3) + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
    assert expected == pytest.approx(0.64332, abs=1e-5)
    assert ndcg(RANKINGS["q1"], QRELS["q1"]) == pytest.approx(expected)
    assert ndcg(RANKINGS["q2"], QRELS["q2"]) == 1.0
    assert ndcg(RANKINGS["q3"], QRELS["q3"]) == 0.0


def test_ndcg_counts_only_the_first_depth_documents_but_the_ideal_counts_answers_never_returned():
    assert ndcg(RANKINGS["q1"], QRELS["q1"], depth=2) == pytest.approx((2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg(["d1"], QRELS["q1"]) == pytest.approx(2 / (2 + 1 / math.log2(3)))


def test_a_question_judging_nothing_relevant_scores_zero_rather_than_dividing_by_zero():
    assert ndcg(["d4"], {"d4": 0}) == recall(["d4"], {"d4": 0}) == 0.0


def test_recall_is_the_share_of_relevant_documents_ranked_within_depth():
    assert recall(RANKINGS["q1"], QRELS["q1"]) == 1.0  # a grade-0 judgement is not a document to find
    assert recall(RANKINGS["q1"], QRELS["q1"], depth=2) == 0.5
    assert recall(RANKINGS["q3"], QRELS["q3"]) == 0.0


def test_reciprocal_rank_is_one_over_the_first_relevant_rank_however_deep():
    assert reciprocal_rank(RANKINGS["q1"], QRELS["q1"]) == 0.5
    assert reciprocal_rank(RANKINGS["q2"], QRELS["q2"]) == 1.0
    assert reciprocal_rank(RANKINGS["q3"], QRELS["q3"]) == 0.0
    deep = [f"x{n}" for n in range(10)] + ["d5"]
    assert reciprocal_rank(deep, QRELS["q3"]) == pytest.approx(1 / 11)


def test_a_hit_needs_a_relevant_document_within_the_first_ten():
    deep = [f"x{n}" for n in range(10)] + ["d5"]
    assert hit(deep, QRELS["q3"]) == 0.0
    assert hit(deep[1:], QRELS["q3"]) == 1.0
    assert hit(["d4"], QRELS["q1"]) == 0.0  # judged, but grade 0


def test_a_question_score_lists_each_relevant_document_found_with_its_rank():
    score = score_question(RANKINGS["q1"], QRELS["q1"], latency_ms=12.5)

    assert score.found == (("d1", 2), ("d3", 4))
    assert (score.recall, score.reciprocal_rank, score.hit, score.latency_ms) == (1.0, 0.5, 1.0, 12.5)
    assert score_question(RANKINGS["q3"], QRELS["q3"], latency_ms=1.0).found == ()


def test_the_summary_is_the_mean_of_each_metric_and_the_p95_latency():
    scores = [score_question(RANKINGS[q], QRELS[q], LATENCIES[q]) for q in ("q1", "q2", "q3")]

    summary = summarise(scores)

    assert summary.questions == 3
    assert summary.ndcg == pytest.approx((0.6433224083306327 + 1.0 + 0.0) / 3)
    assert summary.recall == pytest.approx(2 / 3)
    assert summary.mrr == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert summary.hit_rate == pytest.approx(2 / 3)
    assert summary.latency_mean_ms == pytest.approx(70 / 3)
    # p95 of 10, 20, 40: position 0.95 × 2 = 1.9, so 20 + 0.9 × (40 − 20).
    assert summary.latency_p95_ms == pytest.approx(38.0)
    assert summary.as_dict() == {
        "questions": 3,
        "ndcg": summary.ndcg,
        "recall": summary.recall,
        "mrr": summary.mrr,
        "hit_rate": summary.hit_rate,
        "latency_mean_ms": summary.latency_mean_ms,
        "latency_p95_ms": 38.0,
    }


def test_a_summary_of_no_questions_is_all_zeros():
    assert summarise([]) == Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def test_percentile_interpolates_between_the_closest_ranks():
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([7], 95) == 7
    with pytest.raises(ValueError):
        percentile([], 50)


def test_paired_bootstrap_of_identical_scores_is_exactly_zero():
    assert paired_bootstrap([0.2, 0.5, 0.9], [0.2, 0.5, 0.9]) == Difference(0.0, 0.0, 0.0)


def test_paired_bootstrap_of_a_constant_shift_is_that_shift_with_no_spread():
    difference = paired_bootstrap([0.3, 0.6, 0.8, 0.1], [0.2, 0.5, 0.7, 0.0])

    assert (difference.mean, difference.low, difference.high) == pytest.approx((0.1, 0.1, 0.1))


def test_paired_bootstrap_interval_excludes_zero_only_when_the_questions_agree():
    better_everywhere = paired_bootstrap([0.5 + 0.01 * n for n in range(40)], [0.4 + 0.005 * n for n in range(40)])
    # Half the questions gain 0.1, half lose 0.1: the mean is 0, and the interval straddles it.
    even = paired_bootstrap([0.6, 0.4] * 20, [0.5, 0.5] * 20)

    assert better_everywhere.low > 0 and better_everywhere.excludes_zero
    assert even.mean == pytest.approx(0.0)
    assert even.low < 0 < even.high and not even.excludes_zero


def test_paired_bootstrap_pairs_questions_rather_than_pooling_them():
    ours = [0.9, 0.1, 0.5, 0.7, 0.3, 0.2, 0.8, 0.6]
    theirs = [score - 0.01 for score in ours]

    # Unpaired, these two lists would be indistinguishable; paired, every question is 0.01 better.
    assert paired_bootstrap(ours, theirs).low == pytest.approx(0.01)


def test_paired_bootstrap_keeps_the_quality_bench_numerics():
    """The figures bench/quality.py printed before the engine moved here (its paired_difference on
    the same scores): the seed, the resampling and the percentile method are unchanged."""
    ours = [0.9, 0.1, 0.5, 0.7, 0.3, 0.2, 0.8, 0.6]
    theirs = [0.5, 0.3, 0.4, 0.7, 0.1, 0.4, 0.2, 0.6]

    assert paired_bootstrap(ours, theirs) == Difference(0.11250000000000002, -0.06249999999999999, 0.30000000000000004)
    assert paired_bootstrap(ours, theirs, resamples=500, seed=3) == Difference(
        0.11250000000000002, -0.075, 0.31906249999999975
    )


def test_paired_bootstrap_refuses_unpaired_or_empty_scores():
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="no scores"):
        paired_bootstrap([], [])


@pytest.mark.parametrize(
    ("difference", "words"),
    [
        (Difference(0.0312, 0.0121, 0.0498), "B is better than A by 0.031, and the interval [0.012, 0.050] excludes 0"),
        (
            Difference(-0.0312, -0.0498, -0.0121),
            "B is worse than A by 0.031, and the interval [-0.050, -0.012] excludes 0",
        ),
        (
            Difference(0.0104, -0.0052, 0.0261),
            "B is better than A by 0.010, but the interval [-0.005, 0.026] includes 0, so the difference may be chance",
        ),
        (
            Difference(-0.0002, -0.0001, 0.0004),
            "B and A score the same to three decimals, but the interval [0.000, 0.000] includes 0, "
            "so the difference may be chance",
        ),
        # Every question scored the same: no interval to speak of, and no chance either.
        (Difference(0.0, 0.0, 0.0), "B and A score the same on every question"),
    ],
)
def test_describe_says_the_comparison_in_words(difference, words):
    assert describe(difference, ours="B", theirs="A") == words
