"""The one tokenisation rule of text and queries, before PostgreSQL's text search sees them."""

import pytest

from stores.lexical import lexical_query, lexical_text


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("heat-transfer coefficients", ["heat", "transfer", "coefficients"]),
        ("the wing's span", ["the", "wing", "s", "span"]),
        ("mach 5.8, u.s.a.", ["mach", "5", "8", "u", "s", "a"]),
        (
            "mail ops@example.com or see /etc/ragmux.conf",
            ["mail", "ops", "example", "com", "or", "see", "etc", "ragmux", "conf"],
        ),
        ("IL-6 and -6 dB", ["IL", "6", "and", "6", "dB"]),
        ("café über 東京-タワー", ["café", "über", "東京", "タワー"]),
        ("snake_case stays", ["snake_case", "stays"]),
    ],
)
def test_punctuation_is_a_word_break_and_nothing_else_changes(text, words):
    assert lexical_text(text).split() == words


def test_line_structure_survives():
    assert lexical_text("one.\ntwo") == "one \ntwo"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("heat-transfer in slabs", "heat transfer in slabs"),
        ('"return policy" refunds', '"return policy" refunds'),
        ('"heat-transfer rates"', '"heat transfer rates"'),
        ("refund -shipping", "refund -shipping"),
        ("refund -heat-transfer", 'refund -"heat transfer"'),
        ('refund -"heat-transfer"', 'refund -"heat transfer"'),
        ("cats OR dogs", "cats OR dogs"),
        ("cats or dogs", 'cats "or" dogs'),  # PostgreSQL would read any "or" as the operator
        ('"cats" Or dogs', '"cats" "Or" dogs'),
        ("what is -- this ?", "what is this"),
        ("- alone", "alone"),
    ],
)
def test_queries_split_the_same_way_and_keep_their_operators(query, expected):
    assert lexical_query(query) == expected
