"""Several stores' hits merged into one context by rank (`interleaved`). Pure, no database."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.clients.v1.grounding import interleaved


@dataclass
class Hit:
    chunk_id: int
    score: float = 0.0


def ids(hits) -> list[int]:
    return [hit.chunk_id for hit in hits]


def test_each_stores_first_then_each_stores_second_in_the_order_named():
    first, second = [Hit(1, 0.01), Hit(2, 0.009)], [Hit(10, 0.97), Hit(11, 0.5), Hit(12, 0.2)]
    assert ids(interleaved([first, second], 10)) == [1, 10, 2, 11, 12]
    assert ids(interleaved([second, first], 10)) == [10, 1, 11, 2, 12]


def test_scores_across_stores_are_not_compared():
    # The second store's scores are far higher: its hits still take turns with the first's.
    assert ids(interleaved([[Hit(1, 0.01), Hit(2, 0.01)], [Hit(3, 0.9), Hit(4, 0.8)]], 3)) == [1, 3, 2]


def test_a_chunk_found_twice_is_kept_once_at_its_first_place_and_the_list_is_cut():
    assert ids(interleaved([[Hit(1), Hit(2)], [Hit(2), Hit(3)]], 10)) == [1, 2, 3]
    assert ids(interleaved([[Hit(1), Hit(2)], [Hit(3), Hit(4)]], 2)) == [1, 3]
    assert interleaved([[], []], 5) == [] and interleaved([], 5) == []
