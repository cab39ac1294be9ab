"""Reads of model connections and prices."""

from __future__ import annotations

from django.db.models import QuerySet

from gateway.models import ModelConnection, ModelPrice


def connection_list() -> QuerySet[ModelConnection]:
    return ModelConnection.objects.order_by("id")


def price_list(*, provider_type: str | None = None) -> QuerySet[ModelPrice]:
    prices = ModelPrice.objects.order_by("provider_type", "model")
    if provider_type:
        prices = prices.filter(provider_type=provider_type)
    return prices
