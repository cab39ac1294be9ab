from __future__ import annotations

import pytest

from stores.choices import ChunkingStrategy, UnknownStrategy


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("section", "section"),
        ("word", "word"),
        ("words", "word"),
        ("semantic", "semantic"),
        ("sentence", "semantic"),
        ("paragraph", "semantic"),
        ("character", "character"),
        ("char", "character"),
        ("chars", "character"),
        ("  Sentence \n", "semantic"),
        ("CHARS", "character"),
    ],
)
def test_strategy_names_and_aliases(name, expected):
    assert ChunkingStrategy.parse(name) == expected


@pytest.mark.parametrize("name", ["", "token", "sections", "semantically"])
def test_an_unknown_strategy_names_the_valid_set(name):
    with pytest.raises(UnknownStrategy) as raised:
        ChunkingStrategy.parse(name)

    assert str(raised.value) == (
        f'unknown chunking strategy "{name}"; '
        "valid: section, word (words), semantic (sentence, paragraph), character (char, chars)"
    )
    assert isinstance(raised.value, ValueError)
