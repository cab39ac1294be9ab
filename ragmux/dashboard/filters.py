"""The dashboard's template filters (built in: every template has them): each shows one kind of
value the same way on every page."""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal

from django import template

from ingestion.queue import stage_of
from ragmux.core.models import AuditEntry
from ragmux.core.signin import OUTCOME_WORDS
from ragmux.core.units import DOLLAR_PLACES, micros_to_dollars

register = template.Library()


@register.filter
def sign_in_outcome(entry: AuditEntry) -> str:
    """A sign-in row's outcome in words: "refused: wrong password", "locked out: …"."""
    words = OUTCOME_WORDS.get(entry.action, entry.action)
    reason = (entry.after or {}).get("reason")
    return f"{words}: {reason}" if reason else words


@register.filter
def json_value(value) -> str:
    """An attribute's value as its JSON reads, but a string as itself: acme, 2024, true."""
    return value if isinstance(value, str) else json.dumps(value)


@register.filter
def json_object(value: dict) -> str:
    """A JSON object to edit in a text input; nothing for an empty one."""
    return json.dumps(value, ensure_ascii=False) if value else ""


@register.filter
def ingestion_stage(progress_percent: int) -> str:
    """A processing document's stage: "embedding 40 %"."""
    return stage_of(progress_percent)


CENT = Decimal("0.01")
# An amount under a dollar keeps this many significant digits ($0.0525, $0.002), so a cheap
# call's cost is neither rounded to cents nor to nothing.
UNDER_A_DOLLAR_DIGITS = 3


@register.filter(name="money")
def dollars(micros: int) -> str:
    """An amount of micro-dollars, the one way every page writes money: from a dollar up, cents
    with thousands separators ("$1,234.50", "$2.50"); under a dollar, three significant digits
    and never fewer than two places ("$0.0525", "$0.002", "$0.50", "$0.00")."""
    amount = micros_to_dollars(micros)
    if amount != 0 and abs(amount) < 1:
        places = min(UNDER_A_DOLLAR_DIGITS - 1 - amount.adjusted(), DOLLAR_PLACES)
        shown = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
        if abs(shown) < 1:
            digits = f"{shown:f}".rstrip("0")
            whole, _, fraction = digits.partition(".")
            return f"${whole}.{fraction.ljust(2, '0')}"
    return f"${amount.quantize(CENT, rounding=ROUND_HALF_UP):,}"


@register.filter(name="number")
def number(value: int | None) -> str:
    """A count as every page writes one: "20,000"; "—" for none."""
    return "—" if value is None else f"{value:,}"


@register.simple_tag
def field_errors(errors: list[str], name: str, label: str) -> str:
    """An input's messages in one line, the API's name for its field (`base_url`, `expires_at`)
    said as the form labels the input ("Base URL", "Expires (UTC)"). Only a name with an
    underscore is the API's: a one-word name ("password", "name") is a word of the message too."""
    if "_" not in name:
        return " ".join(str(message) for message in errors)
    api_name = re.compile(rf"\b{re.escape(name)}\b")
    return " ".join(api_name.sub(str(label), str(message)) for message in errors)
