"""The conversational bench's rule for its two-turn set (issue 46), which docs/benchmarks.md
publishes."""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from conversational import conversational_set, split_turns  # noqa: E402  (the bench folder is not a package)

from gateway.clients.followups import refers_back  # noqa: E402


def test_the_subject_is_the_longest_run_of_content_words_and_the_second_turn_says_it():
    query = "what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft ."
    assert split_turns(query) == (
        "What is known about heated high speed aircraft?",
        "what similarity laws must be obeyed when constructing aeroelastic models of it?",
    )


def test_a_plural_subject_is_they_at_the_start_and_them_elsewhere():
    assert split_turns("buddhist monks protests in saigon .") == (
        "What is known about buddhist monks protests?",
        "they in saigon?",
    )
    assert split_turns("who leads the buddhist monks protests in saigon .")[1] == "who leads the them in saigon?"


def test_punctuation_ends_a_run_and_stays_after_the_pronoun():
    first, second = split_turns("computer architectures, associative processors and memory.")
    assert first == "What is known about computer architectures?"
    assert second == "they, associative processors and memory?"


def test_a_query_that_is_all_subject_is_left_out_and_counted():
    queries = {"1": "heated high speed aircraft .", "2": "what are the problems of flutter at high speed .", "3": "x y"}
    qrels = {"1": {"d": 1}, "2": {"d": 2}, "3": {}}
    turns, left_out = conversational_set(queries, qrels)
    assert (list(turns), left_out) == (["2"], 1)  # "3" has no relevant document: not in the set


def test_every_second_turn_refers_back_by_the_products_rule():
    second = split_turns("what are the problems of flutter at high speed .")[1]
    assert refers_back(second)
