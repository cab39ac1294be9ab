"""model_update, the services' one field-by-field update (no database: nothing is saved)."""

from __future__ import annotations

from decimal import Decimal

from gateway.connections.models import ModelPrice
from ragmux.core.services import model_update


def _price() -> ModelPrice:
    return ModelPrice(provider_type="openai", model="gpt", input_per_mtok=Decimal("1"), output_per_mtok=Decimal("2"))


def test_the_fields_given_are_set_and_the_others_keep_their_values():
    price = _price()

    updated, changed = model_update(
        instance=price,
        fields=("input_per_mtok", "output_per_mtok"),
        data={"input_per_mtok": Decimal("3"), "model": "ignored: not a field to update"},
        save=False,
    )

    assert updated is price
    assert changed is True
    assert (price.input_per_mtok, price.output_per_mtok, price.model) == (Decimal("3"), Decimal("2"), "gpt")


def test_the_same_values_are_no_change():
    price = _price()

    _, changed = model_update(
        instance=price, fields=("input_per_mtok",), data={"input_per_mtok": Decimal("1")}, save=False
    )

    assert changed is False
