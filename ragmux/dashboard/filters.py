"""The dashboard's template filters (built in: every template has them): each shows one kind of
value the same way on every page."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django import template

from ingestion.queue import stage_of
from ragmux.core.units import DOLLAR_PLACES, micros_to_dollars

register = template.Library()


@register.filter
def ingestion_stage(progress_percent: int) -> str:
    """A processing document's stage: "embedding 40 %"."""
    return stage_of(progress_percent)


CENT = Decimal("0.01")
# A sub-cent amount keeps this many significant digits ($0.0042), so it never reads as $0.00.
SUB_CENT_DIGITS = 2


@register.filter(name="money")
def dollars(micros: int) -> str:
    """An amount of micro-dollars as a person reads money: "$1,234.50", "$0.0042", "$0.00".

    Cents from one cent up; below it, the first two significant digits (the smallest amount,
    one micro-dollar, is $0.000001), so a cheap call's cost is not rounded to nothing."""
    amount = micros_to_dollars(micros)
    if amount != 0:
        places = min(SUB_CENT_DIGITS - 1 - amount.adjusted(), DOLLAR_PLACES)
        sub_cent = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
        if abs(sub_cent) < CENT:
            return f"${sub_cent}"
    return f"${amount.quantize(CENT, rounding=ROUND_HALF_UP):,}"
