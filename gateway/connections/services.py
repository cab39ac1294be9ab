"""Services that write model connections and prices."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from decimal import Decimal
from functools import partial

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from gateway.connections import http, selectors
from gateway.connections.credentials import mask_api_key, open_api_key, seal_api_key
from gateway.connections.models import (
    BASE_URL_REQUIRED,
    MAX_ROUTE_TARGETS,
    PRICE_KEY_FIELDS,
    RATE_FIELDS,
    RERANK_API_PROVIDERS,
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
    capabilities_of,
    why_cannot,
    why_route_cannot_use,
)
from gateway.connections.prices import builtin_values
from gateway.connections.providers import local_model
from gateway.connections.providers.chat import NoChat, chat_provider
from gateway.connections.providers.embeddings import NoEmbeddings, effective_base_url, embedding_provider
from gateway.connections.providers.rerank import NoRerank, backend_of, reranker
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import Conflict, InvalidInput, UpstreamFailed

# A model's name, and a route's (which clients send as `model`): a letter or digit, then these.
_NAME_CHARACTERS = "A-Za-z0-9._:/@-"
MODEL_NAME = re.compile(rf"^[A-Za-z0-9][{_NAME_CHARACTERS}]{{0,127}}$")
ROUTE_NAME = re.compile(rf"^[A-Za-z0-9][{_NAME_CHARACTERS}]{{0,{Route._meta.get_field('name').max_length - 1}}}$")
MODEL_NAME_RULE = "1-128 letters, digits or . _ : / @ - and must not contain .."
# Azure's dated API versions (`2024-10-21`, `2025-04-01-preview`).
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")
MAX_DIMENSIONS = 16000
PROBE_TIMEOUT = 60.0
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
        if provider_type in BASE_URL_REQUIRED:
            raise InvalidInput(f"base_url is required for {provider_type}", field="base_url")
        default = effective_base_url(provider_type, "")
        if default:
            # The provider's default is where calls will go: a private one (Ollama's localhost)
            # is refused now, not at the first call. A public default that does not resolve
            # here is left to that call, as the network may differ.
            _check_host(http.parse_url(default), default, unresolvable_ok=True)
        return ""
    try:
        parsed = http.parse_url(base_url)
    except http.InvalidUrl as exc:
        raise InvalidInput(f"base_url must be an http(s) URL with a host: {exc}", field="base_url") from None
    parts = parsed.parts
    if parts.username or parts.password:
        raise InvalidInput("base_url must not carry credentials; use api_key", field="base_url")
    if parts.query or parts.fragment or "?" in base_url or "#" in base_url:
        raise InvalidInput("base_url must not have a query or fragment", field="base_url")
    _check_host(parsed, base_url, unresolvable_ok=False)
    return base_url.rstrip("/")


def _check_host(parsed: http.ParsedUrl, url: str, *, unresolvable_ok: bool) -> None:
    # Refuse now rather than at the first call: a private address is only allowed when the
    # operator said so (the same check runs again on every request and redirect).
    try:
        http.checked_addresses(parsed.host, parsed.port)
    except http.UpstreamBlocked as exc:
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


def _validate_fields(
    *, name: str, provider_type: str, base_url: str, model_name: str, dimensions: int | None, api_version: str
):
    name = name.strip()
    if not name:
        raise InvalidInput("name is required", field="name")
    return (name, *_validate_settings(provider_type, base_url, model_name, dimensions, api_version))


def _validate_settings(provider_type: str, base_url: str, model_name: str, dimensions: int | None, api_version: str):
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
    name, model_name, base_url, dimensions, api_version = _validate_fields(
        name=name,
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        api_version=api_version,
    )
    if ModelConnection.objects.filter(name=name).exists():
        raise Conflict(f"a connection named {name!r} already exists", code="duplicate_name")
    connection = ModelConnection.objects.create(
        name=name,
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        api_version=api_version,
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
    api_version: str = "",
    actor=None,
) -> ModelConnection:
    name, model_name, base_url, dimensions, api_version = _validate_fields(
        name=name,
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        api_version=api_version,
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
    connection.api_version = api_version
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


def _ranked_count(connection: ModelConnection) -> int:
    """How many passages a rerank API ranks of a two-passage probe."""
    probe = reranker(connection, backend=backend_of(connection), timeout=PROBE_TIMEOUT)
    return len(probe.rerank("ping", ["ping", "pong"], top_n=2).ranking)


# What each probe says of the model it reached, in the outcome's field of that name.
_PROBES = {
    ProbeMode.CHAT: ("reply", _chat_reply),
    ProbeMode.EMBEDDING: ("dimensions", embedding_width),
    ProbeMode.RERANK: ("ranked", _ranked_count),
}
_CAPABILITY_MODES = {"chat": ProbeMode.CHAT, "embeddings": ProbeMode.EMBEDDING, "rerank": ProbeMode.RERANK}
MODE_NOUNS = {ProbeMode.CHAT: "chat", ProbeMode.EMBEDDING: "embeddings", ProbeMode.RERANK: "rerank"}


def _probe(connection: ModelConnection, mode: str) -> dict:
    field, call = _PROBES[mode]
    result = {"mode": mode, "ok": True, "reply": None, "dimensions": None, "ranked": None, "error": ""}
    started = time.monotonic()
    try:
        result[field] = call(connection)
    except (UpstreamFailed, NoChat, NoEmbeddings, NoRerank) as exc:
        result.update(ok=False, error=str(exc)[:512])
    result["latency_ms"] = int((time.monotonic() - started) * 1000)
    return result


def _result_said(result: dict) -> str:
    noun = MODE_NOUNS[result["mode"]]
    if not result["ok"]:
        return f"{noun} failed after {result['latency_ms']} ms: {result['error']}"
    if result["mode"] == ProbeMode.CHAT:
        answered = f"answered “{result['reply']}”" if result["reply"] else "answered (an empty reply)"
    elif result["mode"] == ProbeMode.EMBEDDING:
        answered = f"answered with vectors of {result['dimensions']} dimensions"
    else:
        answered = f"ranked {result['ranked']} of 2 passages"
    return f"{noun} {answered} in {result['latency_ms']} ms"


def _sentence(text: str) -> str:
    text = text.rstrip(". ")
    return f"{text[:1].upper()}{text[1:]}."


def _test_plan(connection: ModelConnection, mode: str | None, uses: dict[str, list[str]]) -> tuple[list[str], str]:
    """The modes a test tries, and why those, in words: the one asked for, else what the
    connection is used for, else everything its type can do."""
    if mode:
        return [mode], f"Tried {MODE_NOUNS[mode]}, as asked"
    if uses:
        used = ", ".join(f"{MODE_NOUNS[m]} ({', '.join(users)})" for m, users in uses.items())
        return list(uses), f"Tried what it is used for: {used}"
    able = [m for capability, m in _CAPABILITY_MODES.items() if capabilities_of(connection.provider_type)[capability]]
    label = ProviderType(connection.provider_type).label
    return (
        able,
        f"Not used yet, so tried everything its type ({label}) can do: {', '.join(MODE_NOUNS[m] for m in able)}",
    )


def _tested(connection: ModelConnection, mode: str | None, uses: dict[str, list[str]]) -> dict:
    """The outcome of probing ``connection``: each mode's result, and whether it passed. A
    connection in use passes when every use answered; an unused one when anything did (an
    embedding model that cannot chat is still a good embedding connection)."""
    refusal = _why_cannot_probe(connection, mode) if mode else None
    if refusal is not None:
        raise InvalidInput(refusal, field="mode")
    modes, why = _test_plan(connection, mode, uses)
    results = [_probe(connection, m) for m in modes]
    answered = [r["ok"] for r in results]
    ok = any(answered) if not mode and not uses else all(answered)
    failed = [r for r in results if not r["ok"]]
    first = {
        field: next((r[field] for r in results if r[field] is not None), None) for field in ("reply", "dimensions")
    }
    return {
        "ok": ok,
        "mode": modes[0],
        "modes": modes,
        "why": why,
        "summary": f"{why}. {_sentence('; '.join(_result_said(r) for r in results))}",
        "results": results,
        **first,
        "latency_ms": sum(r["latency_ms"] for r in results),
        # Each failure, named by its mode when several were tried.
        "error": "; ".join(
            f"{MODE_NOUNS[r['mode']]}: {r['error']}" if len(results) > 1 else r["error"] for r in failed
        )[:512],
    }


def _why_cannot_probe(connection: ModelConnection, mode: str) -> str | None:
    """Why ``connection`` cannot be probed in ``mode``; None when it can. Only a rerank API is
    probed by a ranking: a chat model reranks by chat, which is its chat probe."""
    if mode != ProbeMode.RERANK:
        return why_cannot(connection, Capability.EMBED if mode == ProbeMode.EMBEDDING else Capability.CHAT)
    if connection.provider_type in RERANK_API_PROVIDERS.values():
        return None
    return (
        f'the {connection.provider_type} connection "{connection.name}" has no rerank API: '
        "a store reranks with it by chat, so test its chat"
    )


def connection_test(*, connection: ModelConnection, mode: str | None = None, actor=None) -> dict:
    """Probes the connection and records the outcome. Without a mode it tries what the
    connection is used for (a project's chat, a store's embeddings, a store's reranking), and an
    unused connection everything its type can do (see :func:`_tested`)."""
    outcome = _tested(connection, mode, selectors.connection_uses(connection))
    ModelConnection.objects.filter(pk=connection.pk).update(
        last_test_at=timezone.now(),
        last_test_ok=outcome["ok"],
        last_test_latency_ms=outcome["latency_ms"],
        last_test_dimensions=outcome["dimensions"],
        last_test_error=outcome["error"],
        last_test_modes=outcome["modes"],
    )
    audited = {name: outcome[name] for name in ("ok", "modes", "why", "dimensions", "reply", "latency_ms", "error")}
    _audit_connection(connection, actor=actor, action="connection.test", after=audited)
    return outcome


def connection_trial(
    *,
    provider_type: str,
    base_url: str,
    model_name: str,
    dimensions: int | None,
    api_version: str,
    api_key: str,
    mode: str | None = None,
    connection_id: int | None = None,
) -> dict:
    """Tests a connection before it is saved ("Test before saving"), checked as a save would be;
    nothing is stored or audited and the key lives only in this call. With ``connection_id`` (the
    connection being edited) an empty key is that connection's stored one, and its uses decide
    what is tried."""
    model_name, base_url, dimensions, api_version = _validate_settings(
        provider_type, base_url, model_name, dimensions, api_version
    )
    saved = selectors.connection_named_by(connection_id, field="connection_id")
    trial = ModelConnection(
        name=saved.name if saved else "unsaved",
        provider_type=provider_type,
        base_url=base_url,
        model_name=model_name,
        dimensions=dimensions,
        api_version=api_version,
    )
    try:
        trial.trial_api_key = api_key.strip() or (open_api_key(saved) if saved else "")
    except DecryptionFailed as exc:
        raise InvalidInput(exc.message, field="api_key") from None
    return _tested(trial, mode, selectors.connection_uses(saved) if saved else {})


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
        connection = selectors.connection_named_by(spec.connection_id, field=f"{field}.connection_id")
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
