"""Writes of projects and gateway keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TypedDict, Unpack

from django.db import transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from gateway.clients.gateway_keys import DISPLAY_PREFIX_LENGTH, hash_key, new_key
from gateway.clients.models import (
    LIMIT_FIELDS,
    GatewayKey,
    Project,
    QueryRewrite,
    RequestLog,
    Scope,
    SpendLimits,
    StoredResponse,
)
from gateway.connections.models import Capability, ModelConnection, Route, RouteKind, why_cannot
from gateway.connections.selectors import connection_named_by, route_named_by
from ragmux.core import asyncdb
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput
from ragmux.core.services import model_update
from retrieval.filters import Filter, as_json
from stores.models import RagStore

PROJECT_FIELDS = (
    "name",
    "chat_connection_id",
    "chat_route_id",
    "embedding_connection_id",
    "store_id",
    "system_prompt",
    "query_rewrite",
    "query_rewrite_connection_id",
    *LIMIT_FIELDS,
)
# The two fields of which a project sets exactly one: what answers its chat.
CHAT_FIELDS = ("chat_connection_id", "chat_route_id")
# A key is audited by its display prefix; its hash never leaves the table.
KEY_FIELDS = ("project_id", "name", "prefix", "scopes", "filters", "expires_at", "revoked_at", *LIMIT_FIELDS)


class Limits(TypedDict, total=False):
    """Values of `SpendLimits` fields (micro-dollars for the dollar budgets)."""

    rate_limit_rpm: int
    rate_limit_tpm: int
    budget_daily_tokens: int
    budget_monthly_tokens: int
    budget_daily_usd_micros: int
    budget_monthly_usd_micros: int


class ProjectChanges(Limits, total=False):
    name: str
    chat_connection_id: int | None
    chat_route_id: int | None
    allowed_route_ids: list[int]
    embedding_connection_id: int | None
    store_id: int | None
    system_prompt: str
    query_rewrite: str
    query_rewrite_connection_id: int | None


class KeyChanges(Limits, total=False):
    name: str
    # None: every scope.
    scopes: list[str] | None
    # None: the key never expires.
    expires_at: datetime | None
    # None: the key reads the whole store.
    filters: Filter | None


_audit_project = partial(audit_change, object_type="project")


def _project_snapshot(project: Project) -> dict:
    allowed = sorted(project.allowed_routes.values_list("pk", flat=True)) if project.pk else []
    return {**snapshot(project, PROJECT_FIELDS), "allowed_route_ids": allowed}


def _audit_key(api_key: GatewayKey, **change) -> None:
    # Described by its name alone: str() of a key adds its display prefix.
    audit_change(api_key, object_type="gateway_key", label=api_key.name, **change)


@dataclass(frozen=True)
class IssuedKey:
    """A key as created or rotated: the plaintext exists only here, once."""

    key: str
    api_key: GatewayKey


def _connection_that_can(connection_id: int | None, *, field: str, capability: Capability) -> ModelConnection | None:
    connection = connection_named_by(connection_id, field=field)
    refusal = why_cannot(connection, capability) if connection is not None else None
    if refusal is not None:
        raise InvalidInput(refusal, field=field)
    return connection


def _set_chat(project: Project, connection_id: int | None, route_id: int | None) -> None:
    """Points the project's chat at a connection or a chat route: one, never both."""
    if connection_id is not None and route_id is not None:
        raise InvalidInput("give chat_connection_id or chat_route_id, not both", field="chat_route_id")
    if connection_id is None and route_id is None:
        raise InvalidInput("chat_connection_id (or chat_route_id) is required", field="chat_connection_id")
    project.chat_connection = _connection_that_can(
        connection_id, field="chat_connection_id", capability=Capability.CHAT
    )
    route = route_named_by(route_id, field="chat_route_id")
    if route is not None and route.kind != RouteKind.CHAT:
        raise InvalidInput(f"route {route.name!r} is a {route.kind} route, not a chat route", field="chat_route_id")
    project.chat_route = route


def _allowed_routes(route_ids: list[int]) -> list[Route]:
    routes = list(Route.objects.filter(pk__in=set(route_ids)))
    missing = sorted(set(route_ids) - {route.pk for route in routes})
    if missing:
        raise InvalidInput(f"no route {', '.join(map(str, missing))}", field="allowed_route_ids")
    return routes


def _store(store_id: int | None) -> RagStore | None:
    if store_id is None:
        return None
    store = RagStore.objects.filter(pk=store_id).first()
    if store is None:
        raise InvalidInput("store_id does not reference an existing RAG store", field="store_id")
    return store


def _required_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise InvalidInput("name is required", field="name")
    return name


def _query_rewrite(mode: str) -> str:
    if mode not in QueryRewrite.values:
        raise InvalidInput(f"query_rewrite must be one of {', '.join(QueryRewrite.values)}", field="query_rewrite")
    return mode


def _set_limits(target: SpendLimits, limits: Limits) -> None:
    for field in LIMIT_FIELDS:
        if limits.get(field, 0) < 0:
            raise InvalidInput("rate limits and budgets must be 0 (unlimited) or positive", field=field)
    model_update(instance=target, fields=LIMIT_FIELDS, data=limits, save=False)


def _apply(project: Project, changes: ProjectChanges) -> Project:
    """Sets the fields ``changes`` names, each validated; the others keep their values."""
    if "name" in changes:
        name = _required_name(changes["name"])
        if Project.objects.filter(name=name).exclude(pk=project.pk).exists():
            raise Conflict(f"a project named {name!r} already exists", code="duplicate_name")
        project.name = name
    if any(field in changes for field in CHAT_FIELDS):
        _set_chat(project, changes.get("chat_connection_id"), changes.get("chat_route_id"))
    if "embedding_connection_id" in changes:
        project.embedding_connection = _connection_that_can(
            changes["embedding_connection_id"], field="embedding_connection_id", capability=Capability.EMBED
        )
    if "store_id" in changes:
        project.store = _store(changes["store_id"])
    if "system_prompt" in changes:
        project.system_prompt = changes["system_prompt"]
    if "query_rewrite" in changes:
        project.query_rewrite = _query_rewrite(changes["query_rewrite"])
    if "query_rewrite_connection_id" in changes:
        project.query_rewrite_connection = _connection_that_can(
            changes["query_rewrite_connection_id"], field="query_rewrite_connection_id", capability=Capability.CHAT
        )
    _set_limits(project, changes)
    project.save()
    if "allowed_route_ids" in changes:
        project.allowed_routes.set(_allowed_routes(changes["allowed_route_ids"]))
    return project


@transaction.atomic
def project_create(
    *,
    name: str,
    embedding_connection_id: int | None,
    store_id: int | None,
    system_prompt: str,
    chat_connection_id: int | None = None,
    chat_route_id: int | None = None,
    allowed_route_ids: list[int] | None = None,
    query_rewrite: str = QueryRewrite.OFF,
    query_rewrite_connection_id: int | None = None,
    actor=None,
    **limits: Unpack[Limits],
) -> Project:
    project = _apply(
        Project(),
        ProjectChanges(
            name=name,
            chat_connection_id=chat_connection_id,
            chat_route_id=chat_route_id,
            allowed_route_ids=allowed_route_ids or [],
            embedding_connection_id=embedding_connection_id,
            store_id=store_id,
            system_prompt=system_prompt,
            query_rewrite=query_rewrite,
            query_rewrite_connection_id=query_rewrite_connection_id,
            **limits,
        ),
    )
    _audit_project(project, actor=actor, action="project.create", after=_project_snapshot(project))
    return project


@transaction.atomic
def project_update(*, project: Project, actor=None, **changes: Unpack[ProjectChanges]) -> Project:
    """Changes the fields given (a full update gives all but the limits it leaves as they are)."""
    locked = Project.objects.select_for_update().get(pk=project.pk)
    before = _project_snapshot(locked)
    project = _apply(locked, changes)
    _audit_project(project, actor=actor, action="project.update", before=before, after=_project_snapshot(project))
    return project


def project_route_allow(*, project: Project, route: Route, actor=None) -> Project:
    """Lets ``project``'s keys name ``route`` as their model, beside the routes it allows already."""
    allowed = list(project.allowed_routes.values_list("pk", flat=True))
    if route.pk in allowed:
        return project
    return project_update(project=project, actor=actor, allowed_route_ids=[*allowed, route.pk])


@transaction.atomic
def project_delete(*, project: Project, actor=None) -> None:
    before = _project_snapshot(project)
    # Its keys and request log rows go with it (ON DELETE CASCADE).
    Project.objects.filter(pk=project.pk).delete()
    _audit_project(project, actor=actor, action="project.delete", before=before)


def _validated_scopes(scopes: list[str] | None) -> list[str]:
    if scopes is None:
        return list(Scope.values)
    unknown = sorted(set(scopes) - set(Scope.values))
    if unknown:
        raise InvalidInput(f"unknown scopes {', '.join(unknown)}; use {', '.join(Scope.values)}", field="scopes")
    if not scopes:
        raise InvalidInput("a key needs at least one scope", field="scopes")
    return [scope for scope in Scope.values if scope in scopes]


def _set_secret(api_key: GatewayKey) -> str:
    key = new_key()
    api_key.key_hash = hash_key(key)
    api_key.prefix = key[:DISPLAY_PREFIX_LENGTH]
    return key


def _future(expires_at: datetime | None) -> datetime | None:
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput("expires_at must be in the future", field="expires_at")
    return expires_at


def _scope(filters: Filter | None) -> dict | None:
    """A key's document scope as stored: the filter's wire shape."""
    return None if filters is None else as_json(filters)


@transaction.atomic
def key_create(
    *,
    project: Project,
    name: str,
    scopes: list[str] | None,
    expires_at: datetime | None,
    filters: Filter | None = None,
    actor=None,
    **limits: Unpack[Limits],
) -> IssuedKey:
    api_key = GatewayKey(
        project=project,
        name=_required_name(name),
        scopes=_validated_scopes(scopes),
        expires_at=_future(expires_at),
        filters=_scope(filters),
    )
    _set_limits(api_key, limits)
    key = _set_secret(api_key)
    api_key.save()
    _audit_key(api_key, actor=actor, action="key.create", after=snapshot(api_key, KEY_FIELDS))
    return IssuedKey(key=key, api_key=api_key)


@transaction.atomic
def key_update(*, api_key: GatewayKey, actor=None, **changes: Unpack[KeyChanges]) -> GatewayKey:
    """Changes the fields given; the secret stays (`key_rotate` changes it)."""
    api_key = GatewayKey.objects.select_for_update().get(pk=api_key.pk)
    if api_key.revoked_at is not None:
        raise Conflict("a revoked key cannot be changed; create a new key", code="key_revoked")
    before = snapshot(api_key, KEY_FIELDS)
    if "name" in changes:
        api_key.name = _required_name(changes["name"])
    if "scopes" in changes:
        api_key.scopes = _validated_scopes(changes["scopes"])
    if "expires_at" in changes:
        api_key.expires_at = _future(changes["expires_at"])
    if "filters" in changes:
        api_key.filters = _scope(changes["filters"])
    _set_limits(api_key, changes)
    api_key.save()
    _audit_key(api_key, actor=actor, action="key.update", before=before, after=snapshot(api_key, KEY_FIELDS))
    return api_key


@transaction.atomic
def key_rotate(*, api_key: GatewayKey, actor=None) -> IssuedKey:
    """A new secret on the same key row; the old one stops working at its next request, in
    every process, because keys are looked up in the database on every request."""
    api_key = GatewayKey.objects.select_for_update().get(pk=api_key.pk)
    if api_key.revoked_at is not None:
        raise Conflict("a revoked key cannot be rotated; create a new key", code="key_revoked")
    before = snapshot(api_key, KEY_FIELDS)
    key = _set_secret(api_key)
    api_key.save(update_fields=["key_hash", "prefix"])
    _audit_key(api_key, actor=actor, action="key.rotate", before=before, after=snapshot(api_key, KEY_FIELDS))
    return IssuedKey(key=key, api_key=api_key)


@transaction.atomic
def key_revoke(*, api_key: GatewayKey, actor=None) -> None:
    now = timezone.now()
    if GatewayKey.objects.filter(pk=api_key.pk, revoked_at=None).update(revoked_at=now):
        _audit_key(api_key, actor=actor, action="key.revoke", before={"revoked_at": None}, after={"revoked_at": now})


PURGE_BATCH = 5000


def request_log_purge(*, retention_days: int, batch_size: int = PURGE_BATCH) -> int:
    """Deletes request log rows older than ``retention_days`` (0 keeps everything); returns how
    many went. Each batch is its own short statement, so a large backlog never holds one long
    transaction or lock over the ledger that `/v1` keeps writing to."""
    return _purge_older(RequestLog, retention_days=retention_days, batch_size=batch_size)


def stored_response_purge(*, retention_days: int, batch_size: int = PURGE_BATCH) -> int:
    """Deletes the stored `/v1/responses` older than ``retention_days``, as the request log's."""
    return _purge_older(StoredResponse, retention_days=retention_days, batch_size=batch_size)


def _purge_older(model, *, retention_days: int, batch_size: int) -> int:
    if retention_days <= 0:
        return 0
    cutoff = timezone.now() - timedelta(days=retention_days)
    deleted = 0
    while True:
        ids = list(model.objects.filter(created_at__lt=cutoff).order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        deleted += model.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < batch_size:
            return deleted


_SAVE_RESPONSE = (
    f"INSERT INTO {StoredResponse._meta.db_table} "
    "(id, project_id, key_id, history, input_items, response, created_at) VALUES (%s, %s, %s, %s, %s, %s, now())"
)
_DELETE_RESPONSE = f"DELETE FROM {StoredResponse._meta.db_table} WHERE id = %s AND project_id = %s RETURNING id"


async def response_save(*, project_id: int, key_id: int | None, history: list, items: list, response: dict) -> None:
    """Keeps a `/v1/responses` answer (see :class:`StoredResponse`), on the event loop."""
    params = (response["id"], project_id, key_id, Jsonb(history), Jsonb(items), Jsonb(response))
    await asyncdb.execute(_SAVE_RESPONSE, params)


async def response_delete(*, project_id: int, response_id: str) -> bool:
    """Deletes a stored response of the project; False when it has none of that id."""
    return await asyncdb.fetch_one(_DELETE_RESPONSE, (response_id, project_id)) is not None
