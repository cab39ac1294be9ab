from dataclasses import dataclass
from decimal import Decimal

from gateway.connections.pricing import PRICE_TABLE, UNPRICED, Cost, matching_price, rerank_cost, token_cost


@dataclass
class Row:
    model: str
    input_per_mtok: Decimal = Decimal(0)
    output_per_mtok: Decimal = Decimal(0)
    cached_input_per_mtok: Decimal | None = None
    cache_write_per_mtok: Decimal | None = None
    per_search_unit: Decimal | None = None


def test_the_exact_name_wins_then_the_longest_pattern():
    rows = [Row("*"), Row("gpt-4o*"), Row("gpt-4o-mini*"), Row("gpt-4o-mini")]
    assert matching_price(rows, "gpt-4o-mini").model == "gpt-4o-mini"
    assert matching_price(rows, "gpt-4o-mini-2024").model == "gpt-4o-mini*"
    assert matching_price(rows, "gpt-4o-2024").model == "gpt-4o*"
    assert matching_price(rows, "llama3").model == "*"
    assert matching_price([Row("gpt-4o*")], "claude") is None


def test_a_rate_per_million_tokens_is_micro_dollars_per_token():
    row = Row("m", Decimal("2.50"), Decimal("10.00"), Decimal("1.25"))
    assert token_cost(row, prompt_tokens=1000, completion_tokens=100) == Cost(3500, PRICE_TABLE)
    # Cached tokens are part of the prompt and billed at the cached rate.
    assert token_cost(row, prompt_tokens=1000, completion_tokens=0, cached_tokens=400).micros == 1500 + 500
    assert token_cost(Row("m", Decimal("0.15")), prompt_tokens=3).micros == 0  # 0.45 rounds down
    assert token_cost(Row("m", Decimal("0.15")), prompt_tokens=5).micros == 1  # 0.75 rounds up


def test_cached_tokens_without_a_cached_rate_cost_the_input_rate():
    assert token_cost(Row("m", Decimal("1")), prompt_tokens=10, cached_tokens=10).micros == 10


def test_cache_writes_are_billed_at_their_own_rate_beside_reads_and_plain_input():
    # Anthropic's rates for Claude Sonnet 4.x: input 3, output 15, cache read 0.30, cache write 3.75.
    row = Row("m", Decimal("3"), Decimal("15"), Decimal("0.30"), Decimal("3.75"))
    cost = token_cost(row, prompt_tokens=1000, completion_tokens=10, cached_tokens=200, cache_write_tokens=300)
    assert cost == Cost(500 * 3 + 60 + 1125 + 150, PRICE_TABLE)
    # Counts that do not add up never bill more prompt tokens than the prompt had.
    assert token_cost(row, prompt_tokens=100, cached_tokens=80, cache_write_tokens=80).micros == 24 + 75


def test_cache_writes_without_a_cache_write_rate_cost_the_input_rate():
    row = Row("m", Decimal("2"), cached_input_per_mtok=Decimal("0.5"))
    assert token_cost(row, prompt_tokens=10, cached_tokens=4, cache_write_tokens=6).micros == 2 + 12


def test_no_row_is_unpriced():
    assert token_cost(None, prompt_tokens=10, completion_tokens=10) == Cost(0, UNPRICED)


def test_a_rerank_billed_per_search_unit_adds_the_units_and_never_its_token_rates():
    # Cohere's built-in rate, with token rates an operator typed in as well.
    row = Row("rerank-v3.5", Decimal("5"), Decimal("5"), per_search_unit=Decimal("0.002"))
    assert rerank_cost(row, search_units=3, prompt_tokens=1000, completion_tokens=10) == Cost(6000, PRICE_TABLE)
    # A reply without a count is one search unit.
    assert rerank_cost(row, search_units=None, prompt_tokens=1000).micros == 2000
    assert rerank_cost(Row("r", per_search_unit=Decimal("0.0000005")), search_units=1, prompt_tokens=0).micros == 1


def test_a_rerank_without_a_per_search_unit_rate_is_billed_by_its_tokens():
    # Voyage's rerank-2.5: its tokens at the input rate.
    assert rerank_cost(Row("rerank-2.5", Decimal("0.05")), search_units=None, prompt_tokens=100_000).micros == 5000
    # An llm rerank: the chat connection's prompt and completion rates.
    chat = Row("gpt-4o-mini", Decimal("0.15"), Decimal("0.60"))
    assert rerank_cost(chat, search_units=None, prompt_tokens=2000, completion_tokens=20).micros == 300 + 12


def test_a_rerank_without_a_row_is_unpriced():
    assert rerank_cost(None, search_units=1, prompt_tokens=10) == Cost(0, UNPRICED)
