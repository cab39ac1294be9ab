"""Reads of model connections, prices and routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from django.db.models import Model, Prefetch, QuerySet

from gateway.connections import guard
from gateway.connections.models import (
    BASE_URL_REQUIRED,
    DEFAULT_BASE_URLS,
    PRESETS,
    RERANK_API_PROVIDERS,
    ModelConnection,
    ModelPrice,
    ProbeMode,
    ProviderType,
    Route,
    RouteKind,
    RouteTarget,
    capabilities_of,
    connection_fields_of,
)
from gateway.connections.providers.embeddings import effective_base_url
from ragmux.core.errors import InvalidInput, NotFound

ModelT = TypeVar("ModelT", bound=Model)


def connection_list() -> QuerySet[ModelConnection]:
    return ModelConnection.objects.order_by("id")


def default_embedding_connection(connections):
    """The connection a new store is offered first, of ``connections`` (those that can embed):
    the instance's own local model (which `ragmux serve` creates) when it is there, else the only
    connection that can embed; None when there is a choice to make."""
    local = [c for c in connections if c.provider_type == ProviderType.LOCAL]
    if local:
        return local[0]
    return connections[0] if len(connections) == 1 else None


def private_upstream_refusals(connections) -> dict[int, str]:
    """Each connection to a private address that the guard refuses under the settings running
    now, with the refusal its Test would meet (the private flag was recorded at save, under the
    settings of that moment)."""
    refusals = {}
    for connection in connections:
        if connection.private_upstream:
            refusal = guard.refusal(effective_base_url(connection.provider_type, connection.base_url))
            if refusal:
                refusals[connection.pk] = refusal
    return refusals


def provider_type_list() -> list[dict]:
    """Every provider type a connection can have, with its label, default base URL ("" when it
    has none), whether the connection must name one, its capabilities, the fields of the
    connection form that apply to it, and its presets (well-known services of that type)."""
    return [
        {
            "type": provider_type.value,
            "label": provider_type.label,
            "default_base_url": DEFAULT_BASE_URLS.get(provider_type, ""),
            "base_url_required": provider_type in BASE_URL_REQUIRED,
            "capabilities": capabilities_of(provider_type),
            "fields": connection_fields_of(provider_type),
            "presets": [vars(preset) for preset in PRESETS.get(provider_type, ())],
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


def _named_by(model: type[ModelT], noun: str, object_id: int | None, *, field: str) -> ModelT | None:
    """The row a request names in ``field`` (None when it names none); a refusal of that field
    when no such row exists."""
    if object_id is None:
        return None
    row = model.objects.filter(pk=object_id).first()
    if row is None:
        raise InvalidInput(f"{noun} {object_id} does not exist", field=field)
    return row


def connection_named_by(connection_id: int | None, *, field: str) -> ModelConnection | None:
    return _named_by(ModelConnection, "connection", connection_id, field=field)


def _with_targets(routes: QuerySet[Route]) -> QuerySet[Route]:
    """``routes`` with their targets in order, each with its connection, in two more queries."""
    return routes.prefetch_related(
        Prefetch("targets", queryset=RouteTarget.objects.select_related("connection").order_by("position"))
    )


def route_list(*, kind: str | None = None) -> QuerySet[Route]:
    routes = Route.objects.order_by("name")
    if kind:
        routes = routes.filter(kind=kind)
    return _with_targets(routes)


def route_get(*, route_id: int) -> Route:
    route = _with_targets(Route.objects.filter(pk=route_id)).first()
    if route is None:
        raise NotFound.of("route")
    return route


def route_named_by(route_id: int | None, *, field: str) -> Route | None:
    return _named_by(Route, "route", route_id, field=field)


def connection_uses(connection: ModelConnection) -> dict[str, list[str]]:
    """What ``connection`` is used for, by the kind of call it is made for (ProbeMode values, in
    their order), each with who uses it that way: a project's chat and a chat route's target call
    chat; a store's and a project's embeddings call embeddings; a store's or rerank route's
    reranking calls its rerank API, or chat for a chat model that reranks (the ``llm`` backend).
    Empty when nothing uses it."""
    reranks = ProbeMode.RERANK if connection.provider_type in RERANK_API_PROVIDERS.values() else ProbeMode.CHAT
    found: dict[str, list[str]] = {mode: [] for mode in ProbeMode.values}
    found[ProbeMode.CHAT] += [
        f"chat of project “{name}”" for name in connection.chat_projects.values_list("name", flat=True)
    ]
    found[ProbeMode.EMBEDDING] += [
        f"embeddings of store “{name}”" for name in connection.embedding_stores.values_list("name", flat=True)
    ]
    found[ProbeMode.EMBEDDING] += [
        f"embeddings of project “{name}”" for name in connection.embedding_projects.values_list("name", flat=True)
    ]
    found[reranks] += [
        f"reranking of store “{name}”"
        for name in connection.rerank_stores.filter(rerank=True).values_list("name", flat=True)
    ]
    for kind, name in connection.route_targets.values_list("route__kind", "route__name").distinct():
        found[ProbeMode.CHAT if kind == RouteKind.CHAT else reranks].append(f"{kind} route “{name}”")
    return {mode: users for mode, users in found.items() if users}


@dataclass(frozen=True)
class Blocker:
    """A row that keeps a connection from being deleted: its kind (store, project, route), id,
    name and why it needs the connection."""

    kind: str
    pk: int
    name: str
    why: str


def connection_blockers(connection: ModelConnection) -> list[Blocker]:
    """Every store, project and route whose reference to ``connection`` refuses its deletion
    (a store's rerank connection is cleared instead, so it blocks nothing)."""
    users = [
        *(("store", pk, name, "embeds with it") for pk, name in connection.embedding_stores.values_list("pk", "name")),
        *(("project", pk, name, "chats through it") for pk, name in connection.chat_projects.values_list("pk", "name")),
        *(
            ("project", pk, name, "embeds with it")
            for pk, name in connection.embedding_projects.values_list("pk", "name")
        ),
        *(
            ("route", pk, name, "has it as a target")
            for pk, name in connection.route_targets.values_list("route_id", "route__name").distinct()
        ),
    ]
    return [Blocker(*user) for user in users]
