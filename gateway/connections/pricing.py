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


def token_cost(row: PriceRow | None, *, prompt_tokens: int, completion_tokens: int = 0, cached_tokens: int = 0) -> Cost:
    """``prompt_tokens`` includes ``cached_tokens``, which are billed at the cached rate when the
    row has one."""
    if row is None:
        return Cost(0, UNPRICED)
    cached = min(cached_tokens, prompt_tokens) if row.cached_input_per_mtok is not None else 0
    micros = (
        Decimal(prompt_tokens - cached) * row.input_per_mtok
        + Decimal(cached) * (row.cached_input_per_mtok or 0)
        + Decimal(completion_tokens) * row.output_per_mtok
    )
    return Cost(int(micros.quantize(Decimal(1), rounding=ROUND_HALF_UP)), PRICE_TABLE)
