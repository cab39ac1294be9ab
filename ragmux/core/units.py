"""Units used across the layers."""

from decimal import Decimal

MIB = 1024 * 1024

# Money is kept in integer micro-dollars (costs, dollar budgets): a price in USD per million
# tokens is then exactly micro-dollars per token, and sums never round.
MICROS_PER_DOLLAR = 1_000_000
DOLLAR_PLACES = 6


def dollars_to_micros(dollars: Decimal) -> int:
    """Whole micro-dollars; the caller has checked ``dollars`` has at most ``DOLLAR_PLACES``."""
    return int(dollars * MICROS_PER_DOLLAR)


def micros_to_dollars(micros: int) -> Decimal:
    return Decimal(micros) / MICROS_PER_DOLLAR
