"""Services that write model connections and prices."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from gateway.connections import http
from gateway.connections.credentials import mask_api_key, seal_api_key
from gateway.connections.models import (
    MAX_ROUTE_TARGETS,
    PRICE_KEY_FIELDS,
    RATE_FIELDS,
    Capability,
    ModelConnection,
    ModelPrice,
    PriceSource,
    ProbeMode,
    ProviderType,
    Route,
    RouteKind,
    RouteStrategy,
    RouteTarget,
    why_cannot,
    why_route_cannot_use,
)
from gateway.connections.prices import builtin_values
from gateway.connections.providers import local_model
from gateway.connections.providers.chat import chat_provider
from gateway.connections.providers.embeddings import effective_base_url, embedding_provider
from gateway.connections.selectors import connection_named_by
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput, UpstreamFailed

# A model's name, and a route's (which clients send as `model`): a letter or digit, then these.
_NAME_CHARACTERS = "A-Za-z0-9._:/@-"
MODEL_NAME = re.compile(rf"^[A-Za-z0-9][{_NAME_CHARACTERS}]{{0,127}}$")
ROUTE_NAME = re.compile(rf"^[A-Za-z0-9][{_NAME_CHARACTERS}]{{0,{Route._meta.get_field('name').max_length - 1}}}$")
MODEL_NAME_RULE = "1-128 letters, digits or . _ : / @ - and must not contain .."
MAX_DIMENSIONS = 16000
PROBE_TIMEOUT = 60.0
# Fields that decide what a stored vector means; they cannot change under stored vectors.
VECTOR_DEFINING_FIELDS = ("provider_type", "model_name", "dimensions")
# What the audit trail keeps of a connection: the key only as its masked hint.
AUDITED_CONNECTION_FIELDS = ("name", "provider_type", "base_url", "model_name", "dimensions", "api_key_masked")
AUDITED_PRICE_FIELDS = (*PRICE_KEY_FIELDS, *RATE_FIELDS, "source")
AUDITED_ROUTE_FIELDS = ("name", "kind", "strategy")
# A target as the trail keeps it, in the route's order.
AUDITED_TARGET_FIELDS = ("connection_id", "model_name", "weight", "first_byte_timeout")


_audit_connection = partial(audit_change, object_type="connection")
_audit_price = partial(audit_change, object_type="price")
_audit_route = partial(audit_change, object_type="route")


def _validate_base_url(provider_type: str, base_url: str) -> str:
    base_url = base_url.strip()
    if provider_type == ProviderType.LOCAL:
        if base_url:
            raise InvalidInput("a local connection has no base_url", field="base_url")
        return ""
    if not base_url:
        if provider_type == ProviderType.CUSTOM_OPENAI:
            raise InvalidInput("base_url is required for custom_openai", field="base_url")
        default = effective_base_url(provider_type, "")
        if default:
            # The provider's default is where calls will go: a private one (Ollama's localhost)
            # is refused now, not at the first call. A public default that does not resolve
            # here is left to that call, as the network may differ.
            _check_host(urlsplit(default), default, unresolvable_ok=True)
        return ""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("base_url must be an http(s) URL with a host", field="base_url")
    if parts.username or parts.password:
        raise InvalidInput("base_url must not carry credentials; use api_key", field="base_url")
    if parts.query or parts.fragment or "?" in base_url or "#" in base_url:
        raise InvalidInput("base_url must not have a query or fragment", field="base_url")
    _check_host(parts, base_url, unresolvable_ok=False)
    return base_url.rstrip("/")


def _check_host(parts, url: str, *, unresolvable_ok: bool) -> None:
    try:
        port = parts.port
    except ValueError:
        raise InvalidInput("base_url has an invalid port", field="base_url") from None
    # Refuse now rather than at the first call: a private address is only allowed when the
    # operator said so (the same check runs again on every request and redirect).
    try:
        http.checked_addresses(parts.hostname, port or (443 if parts.scheme == "https" else 80))
    except http.UpstreamBlocked as exc:
        raise InvalidInput(f"{url}: {exc.message}", field="base_url", code=exc.code) from None
    except UpstreamFailed as exc:
        if not unresolvable_ok:
            raise InvalidInput(f"base_url host {parts.hostname!r} cannot be used: {exc}", field="base_url") from None


def _validate_fields(*, name: str, provider_type: str, base_url: str, model_name: str, dimensions: int | None):
    name = name.strip()
    if not name:
        raise InvalidInput("name is required", field="name")
    if provider_type not in ProviderType.values:
        raise InvalidInput(f"provider_type must be one of {', '.join(ProviderType.values)}", field="provider_type")
    model_name = model_name.strip()
    if not MODEL_NAME.match(model_name) or ".." in model_name:
        raise InvalidInput(f"model_name must be {MODEL_NAME_RULE}", field="model_name")
    if dimensions is not None and not 1 <= dimensions <= MAX_DIMENSIONS:
        raise InvalidInput(f"dimensions must be between 1 and {MAX_DIMENSIONS}", field="dimensions")
    if provider_type == ProviderType.LOCAL:
        if model_name != local_model.MODEL_NAME:
            raise InvalidInput(f"the local provider runs {local_model.MODEL_NAME} only", field="model_name")
        if dimensions not in (None, local_model.DIMENSIONS):
            raise InvalidInput(f"{local_model.MODEL_NAME} has {local_model.DIMENSIONS} dimensions", field="dimensions")
        dimensions = local_model.DIMENSIONS
    base_url = _validate_base_url(provider_type, base_url)
    return name, model_name, base_url, dimensions


def _set_api_key(connection: ModelConnection, api_key: str) -> None:
    connection.api_key_sealed = seal_api_key(connection.id, api_key) if api_key else None
    connection.api_key_masked = mask_api_key(api_key)


@transaction.atomic
def connection_create(
    *,
    name: str,
    provider_type: str,
    base_url: str,
    model_name: str,
    dimensions: int | None,
    api_key: str,
    actor=None,
) -> ModelConnection:
    name, model_name, base_url, dimensions = _validate_fields(
        name=name, provider_type=provider_type, base_url=base_url, model_name=model_name, dimensions=dimensions
    )
    if ModelConnection.objects.filter(name=name).exists():
        raise Conflict(f"a connection named {name!r} already exists", code="duplicate_name")
    connection = ModelConnection.objects.create(
        name=name,
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        private_upstream=bool(base_url) and http.url_is_private(base_url),
    )
    # The ciphertext is bound to the row id, so it can only be sealed once the row exists.
    _set_api_key(connection, api_key.strip())
    connection.save(update_fields=["api_key_sealed", "api_key_masked"])
    _audit_connection(
        connection, actor=actor, action="connection.create", after=snapshot(connection, AUDITED_CONNECTION_FIELDS)
    )
    return connection


@transaction.atomic
def connection_update(
    *,
    connection: ModelConnection,
    name: str,
    provider_type: str,
    base_url: str,
    model_name: str,
    dimensions: int | None,
    api_key: str,
    actor=None,
) -> ModelConnection:
    name, model_name, base_url, dimensions = _validate_fields(
        name=name, provider_type=provider_type, base_url=base_url, model_name=model_name, dimensions=dimensions
    )
    if ModelConnection.objects.filter(name=name).exclude(pk=connection.pk).exists():
        raise Conflict(f"a connection named {name!r} already exists", code="duplicate_name")
    changed = [
        f
        for f, new in zip(VECTOR_DEFINING_FIELDS, (provider_type, model_name, dimensions), strict=True)
        if getattr(connection, f) != new
    ]
    if changed and connection.embedding_stores.filter(documents__chunk_count__gt=0).exists():
        raise Conflict(
            f"cannot change {', '.join(changed)}: stores hold vectors made by this model; "
            "create a new connection instead",
            code="connection_in_use",
        )
    before = snapshot(connection, AUDITED_CONNECTION_FIELDS)
    connection.name = name
    connection.provider_type = provider_type
    connection.base_url = base_url
    connection.model_name = model_name
    connection.dimensions = dimensions
    connection.private_upstream = bool(base_url) and http.url_is_private(base_url)
    if api_key.strip():
        _set_api_key(connection, api_key.strip())
    connection.save()
    after = snapshot(connection, AUDITED_CONNECTION_FIELDS)
    if api_key.strip() and after["api_key_masked"] == before["api_key_masked"]:
        # A new key with the same hint is still a change the trail must show.
        before["api_key_masked"] += " (replaced)"
    _audit_connection(connection, actor=actor, action="connection.update", before=before, after=after)
    return connection


@transaction.atomic
def connection_delete(*, connection: ModelConnection, actor=None) -> None:
    stores = list(connection.embedding_stores.values_list("name", flat=True))
    if stores:
        raise Conflict(
            f"connection {connection.name!r} is the embedding model of {', '.join(repr(s) for s in stores)}",
            code="connection_in_use",
            stores=stores,
        )
    before = snapshot(connection, AUDITED_CONNECTION_FIELDS)
    try:
        with transaction.atomic():
            ModelConnection.objects.filter(pk=connection.pk).delete()
    except ProtectedError as exc:
        # Rows of the layers above (projects) that depend on this connection.
        users = sorted({f"{row._meta.verbose_name} {str(row)!r}" for row in exc.protected_objects})
        raise Conflict(
            f"connection {connection.name!r} is in use by {', '.join(users)}",
            code="connection_in_use",
            used_by=users,
        ) from None
    _audit_connection(connection, actor=actor, action="connection.delete", before=before)


def embedding_width(connection: ModelConnection, *, timeout: float = PROBE_TIMEOUT) -> int:
    """The width of the vectors the connection's model returns (one tiny embedding call)."""
    return embedding_provider(connection, timeout=timeout).embed(["ping"]).dimensions


def _chat_reply(connection: ModelConnection) -> str:
    """The text of a one-token answer through the connection."""
    choices = chat_provider(connection).probe(timeout=PROBE_TIMEOUT)["choices"]
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def connection_test(*, connection: ModelConnection, mode: str | None = None, actor=None) -> dict:
    """Probes the connection (one embedding, or a one-token chat answer) and records the outcome.

    Without a mode a connection that can embed is probed with an embedding, the others with chat.
    """
    mode = mode or (ProbeMode.EMBEDDING if connection.supports_embeddings else ProbeMode.CHAT)
    refusal = why_cannot(connection, Capability.EMBED if mode == ProbeMode.EMBEDDING else Capability.CHAT)
    if refusal is not None:
        raise InvalidInput(refusal, field="mode")
    outcome = {"ok": True, "mode": mode, "dimensions": None, "reply": None, "error": ""}
    started = time.monotonic()
    try:
        if mode == ProbeMode.EMBEDDING:
            outcome["dimensions"] = embedding_width(connection)
        else:
            outcome["reply"] = _chat_reply(connection)
    except UpstreamFailed as exc:
        outcome.update(ok=False, error=str(exc)[:512])
    outcome["latency_ms"] = int((time.monotonic() - started) * 1000)
    ModelConnection.objects.filter(pk=connection.pk).update(
        last_test_at=timezone.now(),
        last_test_ok=outcome["ok"],
        last_test_latency_ms=outcome["latency_ms"],
        last_test_dimensions=outcome["dimensions"],
        last_test_error=outcome["error"],
    )
    _audit_connection(connection, actor=actor, action="connection.test", after=outcome)
    return outcome


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
    price.input_per_mtok = input_per_mtok
    price.output_per_mtok = output_per_mtok
    price.cached_input_per_mtok = cached_input_per_mtok
    price.cache_write_per_mtok = cache_write_per_mtok
    price.per_search_unit = per_search_unit
    price.source = PriceSource.USER
    price.save()
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
    for name, value in shipped.items():
        setattr(price, name, value)
    price.source = PriceSource.BUILTIN
    price.save()
    _audit_price(price, actor=actor, action="price.reset", before=before, after=snapshot(price, AUDITED_PRICE_FIELDS))
    return price


# --- routes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetSpec:
    """One target of a route as a request gives it, before it is checked."""

    connection_id: int
    model_name: str = ""
    weight: int = 1
    first_byte_timeout: float | None = None


def _route_snapshot(route: Route) -> dict:
    return {
        **snapshot(route, AUDITED_ROUTE_FIELDS),
        "targets": [snapshot(target, AUDITED_TARGET_FIELDS) for target in route.targets.order_by("position")],
    }


def _validated_route_name(name: str, *, route: Route | None) -> str:
    name = name.strip()
    if not ROUTE_NAME.match(name) or ".." in name:
        raise InvalidInput(
            f"name must be 1-{Route._meta.get_field('name').max_length} letters, digits or . _ : / @ - "
            "and must not contain ..",
            field="name",
        )
    taken = Route.objects.filter(name=name)
    if route is not None:
        taken = taken.exclude(pk=route.pk)
    if taken.exists():
        raise Conflict(f"a route named {name!r} already exists", code="duplicate_name")
    return name


def _validated_targets(kind: str, targets: list[TargetSpec]) -> list[RouteTarget]:
    """Unsaved targets in the order given; each refusal names the target's field."""
    if not 1 <= len(targets) <= MAX_ROUTE_TARGETS:
        raise InvalidInput(f"a route needs 1 to {MAX_ROUTE_TARGETS} targets", field="targets")
    checked: list[RouteTarget] = []
    seen: dict[tuple[int, str], int] = {}
    for position, spec in enumerate(targets):
        field = f"targets.{position}"
        connection = connection_named_by(spec.connection_id, field=f"{field}.connection_id")
        refusal = why_route_cannot_use(connection, kind)
        if refusal is not None:
            raise InvalidInput(f"{refusal}: a {kind} route cannot use it", field=f"{field}.connection_id")
        model_name = spec.model_name.strip()
        if model_name and (not MODEL_NAME.match(model_name) or ".." in model_name):
            raise InvalidInput(f"model_name must be empty or {MODEL_NAME_RULE}", field=f"{field}.model_name")
        if spec.weight < 1:
            raise InvalidInput("weight must be at least 1", field=f"{field}.weight")
        if spec.first_byte_timeout is not None and not spec.first_byte_timeout > 0:
            raise InvalidInput("first_byte_timeout must be positive", field=f"{field}.first_byte_timeout")
        target = RouteTarget(
            position=position,
            connection=connection,
            model_name=model_name,
            weight=spec.weight,
            first_byte_timeout=spec.first_byte_timeout,
        )
        # The same model through the same connection twice is one upstream tried twice.
        same = (connection.pk, target.effective_model_name)
        if same in seen:
            raise InvalidInput(
                f"targets {seen[same]} and {position} both call {target.effective_model_name!r} "
                f"through {connection.name!r}",
                field=f"{field}.connection_id",
            )
        seen[same] = position
        checked.append(target)
    return checked


def _route_users(route: Route) -> list[str]:
    """The projects that chat through ``route`` or may call it by name."""
    chatting = [f"project {name!r}" for name in route.chat_projects.values_list("name", flat=True)]
    allowing = [f"project {name!r}" for name in route.allowed_projects.values_list("name", flat=True)]
    return sorted(set(chatting + allowing))


def _save_route(route: Route, *, name: str, kind: str, strategy: str, targets: list[TargetSpec]) -> Route:
    if kind not in RouteKind.values:
        raise InvalidInput(f"kind must be one of {', '.join(RouteKind.values)}", field="kind")
    if strategy not in RouteStrategy.values:
        raise InvalidInput(f"strategy must be one of {', '.join(RouteStrategy.values)}", field="strategy")
    route.name = _validated_route_name(name, route=route if route.pk else None)
    checked = _validated_targets(kind, targets)
    if route.pk and kind != RouteKind.CHAT and route.chat_projects.exists():
        raise Conflict(
            f"route {route.name!r} answers the chat of {', '.join(_route_users(route))}: it must stay a chat route",
            code="route_in_use",
        )
    route.kind, route.strategy = kind, strategy
    route.save()
    # Replaced whole: a target's identity is its place in the route.
    route.targets.all().delete()
    for target in checked:
        target.route = route
    RouteTarget.objects.bulk_create(checked)
    return route


@transaction.atomic
def route_create(*, name: str, kind: str, strategy: str, targets: list[TargetSpec], actor=None) -> Route:
    route = _save_route(Route(), name=name, kind=kind, strategy=strategy, targets=targets)
    _audit_route(route, actor=actor, action="route.create", after=_route_snapshot(route))
    return route


@transaction.atomic
def route_update(*, route: Route, name: str, kind: str, strategy: str, targets: list[TargetSpec], actor=None) -> Route:
    """Replaces the route's name, kind, strategy and every target."""
    route = Route.objects.select_for_update().get(pk=route.pk)
    before = _route_snapshot(route)
    route = _save_route(route, name=name, kind=kind, strategy=strategy, targets=targets)
    _audit_route(route, actor=actor, action="route.update", before=before, after=_route_snapshot(route))
    return route


@transaction.atomic
def route_delete(*, route: Route, actor=None) -> None:
    """Refused while a project chats through the route or lets its keys call it: a client sending
    its name would otherwise be answered, unannounced, by the project's own chat model."""
    users = _route_users(route)
    if users:
        raise Conflict(f"route {route.name!r} is in use by {', '.join(users)}", code="route_in_use", used_by=users)
    before = _route_snapshot(route)
    Route.objects.filter(pk=route.pk).delete()
    _audit_route(route, actor=actor, action="route.delete", before=before)
