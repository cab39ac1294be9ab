"""What a call cost, from the price table: pure functions over price rows, no database.

A price row's ``model`` is an exact model name or a prefix pattern ending in ``*``. The exact
name wins, then the longest matching pattern. Costs are integer micro-dollars: a rate in USD
per million tokens is exactly micro-dollars per token. A rerank is priced by the row of the
connection that ran it (:func:`rerank_cost`): per search unit when the row has that rate, else
by its tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Protocol

from ragmux.core.units import MICROS_PER_DOLLAR

PRICE_TABLE = "price_table"
UNPRICED = "unpriced"
# Cohere bills one search unit per query of up to 100 documents; a reply without a count is one.
DEFAULT_SEARCH_UNITS = 1


class PriceRow(Protocol):
    model: str
    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cached_input_per_mtok: Decimal | None
    cache_write_per_mtok: Decimal | None
    # USD per rerank search unit (Cohere's billing unit); None for the rows priced by token.
    per_search_unit: Decimal | None


@dataclass(frozen=True)
class Cost:
    micros: int
    source: str


def matching_price(rows: Iterable[PriceRow], model: str) -> PriceRow | None:
    """The row that prices ``model``: its exact name, else the longest ``*`` pattern matching it."""
    best: PriceRow | None = None
    for row in rows:
        if row.model == model:
            return row
        if row.model.endswith("*") and model.startswith(row.model[:-1]):
            if best is None or len(row.model) > len(best.model):
                best = row
    return best


def token_cost(
    row: PriceRow | None,
    *,
    prompt_tokens: int,
    completion_tokens: int = 0,
    cached_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Cost:
    """``prompt_tokens`` includes ``cached_tokens`` (read from the provider's prompt cache) and
    ``cache_write_tokens`` (written to it), each billed at its own rate when the row has one and
    at the input rate when it has none."""
    if row is None:
        return Cost(0, UNPRICED)
    cached = max(min(cached_tokens, prompt_tokens), 0)
    written = max(min(cache_write_tokens, prompt_tokens - cached), 0)
    micros = (
        Decimal(max(prompt_tokens - cached - written, 0)) * row.input_per_mtok
        + Decimal(cached) * _or_input(row.cached_input_per_mtok, row)
        + Decimal(written) * _or_input(row.cache_write_per_mtok, row)
        + Decimal(max(completion_tokens, 0)) * row.output_per_mtok
    )
    return Cost(int(micros.quantize(Decimal(1), rounding=ROUND_HALF_UP)), PRICE_TABLE)


def _or_input(rate: Decimal | None, row: PriceRow) -> Decimal:
    return row.input_per_mtok if rate is None else rate


def rerank_cost(
    row: PriceRow | None, *, search_units: int | None, prompt_tokens: int, completion_tokens: int = 0
) -> Cost:
    """A rerank priced by ``row``, the price of the connection that ran it. A row with a
    ``per_search_unit`` rate bills ``search_units`` (DEFAULT_SEARCH_UNITS when the reranker
    reported none) at that rate and nothing else, even if it has token rates too; any other row
    bills the tokens (Voyage's at its input rate, an ``llm`` rerank's as the chat it was)."""
    if row is None or row.per_search_unit is None:
        return token_cost(row, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    units = DEFAULT_SEARCH_UNITS if search_units is None else max(search_units, 0)
    micros = Decimal(units) * row.per_search_unit * MICROS_PER_DOLLAR
    return Cost(int(micros.quantize(Decimal(1), rounding=ROUND_HALF_UP)), PRICE_TABLE)
