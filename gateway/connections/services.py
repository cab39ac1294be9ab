"""Services that write model connections: their settings, checked, and their sealed keys.
Prices are written by `price_services`, routes by `route_services`, and a connection is tried
by `probes`."""

from __future__ import annotations

import re
from functools import partial

from django.db import transaction
from django.db.models import ProtectedError

from gateway.connections import guard
from gateway.connections.credentials import mask_api_key, seal_api_key
from gateway.connections.models import (
    BASE_URL_REQUIRED,
    ModelConnection,
    ProviderType,
)
from gateway.connections.providers import local_model
from gateway.connections.providers.embeddings import effective_base_url
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput, UpstreamFailed
from ragmux.core.services import model_update

# A model's name, and a route's (which clients send as `model`, route_services): a letter or
# digit, then these.
NAME_CHARACTERS = "A-Za-z0-9._:/@-"
MODEL_NAME = re.compile(rf"^[A-Za-z0-9][{NAME_CHARACTERS}]{{0,127}}$")
MODEL_NAME_RULE = "1-128 letters, digits or . _ : / @ - and must not contain .."
# Azure's dated API versions (`2024-10-21`, `2025-04-01-preview`).
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")
MAX_DIMENSIONS = 16000
# Fields that decide what a stored vector means; they cannot change under stored vectors.
VECTOR_DEFINING_FIELDS = ("provider_type", "model_name", "dimensions")
# What the audit trail keeps of a connection: the key only as its masked hint.
AUDITED_CONNECTION_FIELDS = (
    "name",
    "provider_type",
    "base_url",
    "model_name",
    "api_version",
    "dimensions",
    "api_key_masked",
)


audit_connection = partial(audit_change, object_type="connection")


def _validate_base_url(provider_type: str, base_url: str) -> str:
    base_url = base_url.strip()
    if provider_type == ProviderType.LOCAL:
        if base_url:
            raise InvalidInput("a local connection has no base_url", field="base_url")
        return ""
    if not base_url:
        if provider_type in BASE_URL_REQUIRED:
            raise InvalidInput(f"base_url is required for {provider_type}", field="base_url")
        default = effective_base_url(provider_type, "")
        if default:
            # The provider's default is where calls will go: a private one (Ollama's localhost)
            # is refused now, not at the first call. A public default that does not resolve
            # here is left to that call, as the network may differ.
            _check_host(guard.parse_url(default), default, unresolvable_ok=True)
        return ""
    try:
        parsed = guard.parse_url(base_url)
    except guard.InvalidUrl as exc:
        raise InvalidInput(f"base_url must be an http(s) URL with a host: {exc}", field="base_url") from None
    parts = parsed.parts
    if parts.username or parts.password:
        raise InvalidInput("base_url must not carry credentials; use api_key", field="base_url")
    if parts.query or parts.fragment or "?" in base_url or "#" in base_url:
        raise InvalidInput("base_url must not have a query or fragment", field="base_url")
    _check_host(parsed, base_url, unresolvable_ok=False)
    return base_url.rstrip("/")


def _check_host(parsed: guard.ParsedUrl, url: str, *, unresolvable_ok: bool) -> None:
    # Refuse now rather than at the first call: a private address is only allowed when the
    # operator said so (the same check runs again on every request and redirect).
    try:
        guard.checked_addresses(parsed.host, parsed.port)
    except guard.UpstreamBlocked as exc:
        raise InvalidInput(f"{url}: {exc.message}", field="base_url", code=exc.code) from None
    except UpstreamFailed as exc:
        if not unresolvable_ok:
            raise InvalidInput(f"base_url host {parsed.host!r} cannot be used: {exc}", field="base_url") from None


def _validate_api_version(provider_type: str, api_version: str) -> str:
    api_version = api_version.strip()
    if api_version and provider_type != ProviderType.AZURE_OPENAI:
        raise InvalidInput("api_version applies to azure_openai connections only", field="api_version")
    if api_version and not API_VERSION.match(api_version):
        raise InvalidInput(
            "api_version must be a dated Azure API version such as 2024-10-21 or 2025-04-01-preview, "
            "or empty for the v1 API",
            field="api_version",
        )
    return api_version


def _validated_fields(
    *, name: str, provider_type: str, base_url: str, model_name: str, dimensions: int | None, api_version: str
) -> dict:
    """A connection's stored fields but its key, checked and normalised, as a save writes them."""
    name = name.strip()
    if not name:
        raise InvalidInput("name is required", field="name")
    model_name, base_url, dimensions, api_version = validate_settings(
        provider_type, base_url, model_name, dimensions, api_version
    )
    return {
        "name": name,
        "provider_type": provider_type,
        "base_url": base_url,
        "model_name": model_name,
        "dimensions": dimensions,
        "api_version": api_version,
        "private_upstream": bool(base_url) and guard.url_is_private(base_url),
    }


def validate_settings(provider_type: str, base_url: str, model_name: str, dimensions: int | None, api_version: str):
    """What decides where and how a connection calls, checked and normalised (a saved and an
    unsaved connection alike)."""
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
    api_version = _validate_api_version(provider_type, api_version)
    base_url = _validate_base_url(provider_type, base_url)
    return model_name, base_url, dimensions, api_version


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
    api_version: str = "",
    actor=None,
) -> ModelConnection:
    fields = _validated_fields(
        name=name,
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        api_version=api_version,
    )
    if ModelConnection.objects.filter(name=fields["name"]).exists():
        raise Conflict(f"a connection named {fields['name']!r} already exists", code="duplicate_name")
    connection = ModelConnection.objects.create(**fields)
    # The ciphertext is bound to the row id, so it can only be sealed once the row exists.
    _set_api_key(connection, api_key.strip())
    connection.save(update_fields=["api_key_sealed", "api_key_masked"])
    audit_connection(
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
    api_version: str = "",
    actor=None,
) -> ModelConnection:
    fields = _validated_fields(
        name=name,
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        api_version=api_version,
    )
    if ModelConnection.objects.filter(name=fields["name"]).exclude(pk=connection.pk).exists():
        raise Conflict(f"a connection named {fields['name']!r} already exists", code="duplicate_name")
    changed = [name for name in VECTOR_DEFINING_FIELDS if getattr(connection, name) != fields[name]]
    if changed and connection.embedding_stores.filter(documents__chunk_count__gt=0).exists():
        raise Conflict(
            f"cannot change {', '.join(changed)}: stores hold vectors made by this model; "
            "create a new connection instead",
            code="connection_in_use",
        )
    before = snapshot(connection, AUDITED_CONNECTION_FIELDS)
    model_update(instance=connection, fields=fields, data=fields, save=False)
    if api_key.strip():
        _set_api_key(connection, api_key.strip())
    connection.save()
    after = snapshot(connection, AUDITED_CONNECTION_FIELDS)
    if api_key.strip() and after["api_key_masked"] == before["api_key_masked"]:
        # A new key with the same hint is still a change the trail must show.
        before["api_key_masked"] += " (replaced)"
    audit_connection(connection, actor=actor, action="connection.update", before=before, after=after)
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
    audit_connection(connection, actor=actor, action="connection.delete", before=before)
