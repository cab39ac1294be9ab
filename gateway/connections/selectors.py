"""Reads of model connections and prices."""

from __future__ import annotations

from django.db.models import QuerySet

from gateway.connections.models import ModelConnection, ModelPrice, ProviderType, capabilities_of
from gateway.connections.providers.embeddings import DEFAULT_BASE_URLS
from ragmux.core.errors import InvalidInput, NotFound


def connection_list() -> QuerySet[ModelConnection]:
    return ModelConnection.objects.order_by("id")


def provider_type_list() -> list[dict]:
    """Every provider type a connection can have, with its label, default base URL ("" when the
    connection must name one) and capabilities."""
    return [
        {
            "type": provider_type.value,
            "label": provider_type.label,
            "default_base_url": DEFAULT_BASE_URLS.get(provider_type, ""),
            "capabilities": capabilities_of(provider_type),
        }
        for provider_type in ProviderType
    ]


def price_list(*, provider_type: str | None = None) -> QuerySet[ModelPrice]:
    prices = ModelPrice.objects.order_by("provider_type", "model")
    if provider_type:
        prices = prices.filter(provider_type=provider_type)
    return prices


def connection_get(connection_id: int) -> ModelConnection:
    connection = ModelConnection.objects.filter(pk=connection_id).first()
    if connection is None:
        raise NotFound.of("connection")
    return connection


def price_get(price_id: int) -> ModelPrice:
    price = ModelPrice.objects.filter(pk=price_id).first()
    if price is None:
        raise NotFound.of("price")
    return price


def connection_named_by(connection_id: int | None, *, field: str) -> ModelConnection | None:
    """The connection a request names in ``field`` (None when it names none); a refusal of that
    field when no such connection exists."""
    if connection_id is None:
        return None
    connection = ModelConnection.objects.filter(pk=connection_id).first()
    if connection is None:
        raise InvalidInput(f"connection {connection_id} does not exist", field=field)
    return connection
