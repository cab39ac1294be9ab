"""Services that write the price table: a user's prices, and a built-in price edited or reset."""

from __future__ import annotations

from decimal import Decimal
from functools import partial

from django.db import IntegrityError, transaction

from gateway.connections.models import (
    PRICE_KEY_FIELDS,
    RATE_FIELDS,
    ModelPrice,
    PriceSource,
)
from gateway.connections.prices import builtin_values
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput
from ragmux.core.services import model_update

# What an edit or a reset writes of a price: its rates and whose they are.
PRICED_FIELDS = (*RATE_FIELDS, "source")
AUDITED_PRICE_FIELDS = (*PRICE_KEY_FIELDS, *PRICED_FIELDS)

_audit_price = partial(audit_change, object_type="price")


def _validate_price_model(model: str) -> str:
    model = model.strip()
    if not model or len(model) > 128:
        raise InvalidInput("model must be 1-128 characters", field="model")
    if "*" in model[:-1]:
        raise InvalidInput("model may only end in * (a prefix pattern)", field="model")
    return model


@transaction.atomic
def price_create(
    *,
    provider_type: str,
    model: str,
    input_per_mtok: Decimal,
    output_per_mtok: Decimal,
    cached_input_per_mtok: Decimal | None,
    cache_write_per_mtok: Decimal | None,
    per_search_unit: Decimal | None,
    actor=None,
) -> ModelPrice:
    model = _validate_price_model(model)
    try:
        with transaction.atomic():
            price = ModelPrice.objects.create(
                provider_type=provider_type,
                model=model,
                input_per_mtok=input_per_mtok,
                output_per_mtok=output_per_mtok,
                cached_input_per_mtok=cached_input_per_mtok,
                cache_write_per_mtok=cache_write_per_mtok,
                per_search_unit=per_search_unit,
                source=PriceSource.USER,
            )
    except IntegrityError:
        raise Conflict(
            f"a price for {provider_type} {model!r} already exists; update it instead", code="duplicate_price"
        ) from None
    _audit_price(price, actor=actor, action="price.create", after=snapshot(price, AUDITED_PRICE_FIELDS))
    return price


@transaction.atomic
def price_update(
    *,
    price: ModelPrice,
    input_per_mtok: Decimal,
    output_per_mtok: Decimal,
    cached_input_per_mtok: Decimal | None,
    cache_write_per_mtok: Decimal | None,
    per_search_unit: Decimal | None,
    actor=None,
) -> ModelPrice:
    """Edits a price; an edited built-in row becomes the user's and upgrades leave it alone."""
    before = snapshot(price, AUDITED_PRICE_FIELDS)
    rates = {
        "input_per_mtok": input_per_mtok,
        "output_per_mtok": output_per_mtok,
        "cached_input_per_mtok": cached_input_per_mtok,
        "cache_write_per_mtok": cache_write_per_mtok,
        "per_search_unit": per_search_unit,
    }
    model_update(instance=price, fields=PRICED_FIELDS, data={**rates, "source": PriceSource.USER})
    _audit_price(price, actor=actor, action="price.update", before=before, after=snapshot(price, AUDITED_PRICE_FIELDS))
    return price


@transaction.atomic
def price_delete(*, price: ModelPrice, actor=None) -> ModelPrice | None:
    """Deletes a user price; one that overrode a built-in row reverts to the built-in values,
    which are returned. Built-in rows themselves cannot be deleted."""
    if price.source == PriceSource.BUILTIN:
        raise Conflict("built-in prices cannot be deleted; edit the price instead", code="builtin_price")
    before = snapshot(price, AUDITED_PRICE_FIELDS)
    shipped = builtin_values(price.provider_type, price.model)
    if shipped is None:
        ModelPrice.objects.filter(pk=price.pk).delete()
        _audit_price(price, actor=actor, action="price.delete", before=before)
        return None
    model_update(instance=price, fields=PRICED_FIELDS, data={**shipped, "source": PriceSource.BUILTIN})
    _audit_price(price, actor=actor, action="price.reset", before=before, after=snapshot(price, AUDITED_PRICE_FIELDS))
    return price
