"""Services that write model connections and prices."""

from __future__ import annotations

import re
import time
from decimal import Decimal
from functools import partial
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from gateway.connections import http
from gateway.connections.credentials import mask_api_key, seal_api_key
from gateway.connections.models import (
    PRICE_KEY_FIELDS,
    RATE_FIELDS,
    Capability,
    ModelConnection,
    ModelPrice,
    PriceSource,
    ProbeMode,
    ProviderType,
    why_cannot,
)
from gateway.connections.prices import builtin_values
from gateway.connections.providers import local_model
from gateway.connections.providers.chat import chat_provider
from gateway.connections.providers.embeddings import effective_base_url, embedding_provider
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput, UpstreamFailed

MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")
MAX_DIMENSIONS = 16000
PROBE_TIMEOUT = 60.0
# Fields that decide what a stored vector means; they cannot change under stored vectors.
VECTOR_DEFINING_FIELDS = ("provider_type", "model_name", "dimensions")
# What the audit trail keeps of a connection: the key only as its masked hint.
AUDITED_CONNECTION_FIELDS = ("name", "provider_type", "base_url", "model_name", "dimensions", "api_key_masked")
AUDITED_PRICE_FIELDS = (*PRICE_KEY_FIELDS, *RATE_FIELDS, "source")


_audit_connection = partial(audit_change, object_type="connection")
_audit_price = partial(audit_change, object_type="price")


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
        raise InvalidInput(
            "model_name must be 1-128 letters, digits or . _ : / @ - and must not contain ..", field="model_name"
        )
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
