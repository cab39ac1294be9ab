"""What a call cost, from the price table: pure functions over price rows, no database.

A price row's ``model`` is an exact model name or a prefix pattern ending in ``*``. The exact
name wins, then the longest matching pattern. Costs are integer micro-dollars: a rate in USD
per million tokens is exactly micro-dollars per token.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Protocol

PRICE_TABLE = "price_table"
UNPRICED = "unpriced"


class PriceRow(Protocol):
    model: str
    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cached_input_per_mtok: Decimal | None
    cache_write_per_mtok: Decimal | None


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
