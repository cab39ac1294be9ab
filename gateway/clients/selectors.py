"""Reads of projects, gateway keys and the request log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Trunc

from gateway.clients.limits import BUDGETS, MICROS, PROJECT, LimitKind, window_start
from gateway.clients.models import GatewayKey, Project, RequestLog, StoredResponse, UsageCounter
from gateway.clients.responses_input import is_response_id
from gateway.connections.cooldowns import target_key
from gateway.connections.models import (
    PRICE_KEY_FIELDS,
    RATE_FIELDS,
    ModelConnection,
    ModelPrice,
    Route,
    RouteKind,
    RouteTarget,
)
from ragmux.core import asyncdb
from ragmux.core.errors import NotFound
from stores.models import RagStore


def project_list() -> QuerySet[Project]:
    return Project.objects.order_by("name")


def project_get(*, project_id: int) -> Project:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        raise NotFound.of("project")
    return project


def key_list(*, project: Project) -> QuerySet[GatewayKey]:
    return GatewayKey.objects.filter(project=project, revoked_at=None).order_by("id")


def key_get(*, key_id: int) -> GatewayKey:
    api_key = GatewayKey.objects.filter(pk=key_id, revoked_at=None).first()
    if api_key is None:
        raise NotFound.of("key")
    return api_key


def key_choices() -> QuerySet[GatewayKey]:
    """Every key, revoked ones included (their calls stay in the log), with its project."""
    return GatewayKey.objects.select_related("project").order_by("project__name", "name", "id")


def key_search(
    *, project_id: int | None = None, revoked: bool | None = None, scope: str | None = None
) -> QuerySet[GatewayKey]:
    """Keys across every project (`key_choices`' order) narrowed by each filter given: a
    project, revoked or not, holding a scope."""
    keys = key_choices()
    if project_id is not None:
        keys = keys.filter(project_id=project_id)
    if revoked is not None:
        keys = keys.filter(revoked_at__isnull=not revoked)
    if scope is not None:
        keys = keys.filter(scopes__contains=[scope])
    return keys


def table_columns(model, alias: str) -> str:
    """Every column of ``model`` under the table alias ``alias``, as a select list."""
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


# The key with everything a `/v1` call needs (what a select_related of the project, its
# connections and its store gives), as one statement the async pool prepares once per connection.
_KEY_ROWS = (
    (GatewayKey, "k"),
    (Project, "p"),
    (ModelConnection, "cc"),
    (ModelConnection, "ec"),
    (RagStore, "s"),
    (ModelConnection, "sc"),
    (ModelConnection, "rc"),
)
_ALLOWED_ROUTES = Project.allowed_routes.through._meta.db_table
_KEY_BY_HASH = (
    f"SELECT {', '.join(table_columns(model, alias) for model, alias in _KEY_ROWS)}, "
    # Whether the project may call routes by name: a chat whose project may not needs no lookup.
    f"EXISTS (SELECT 1 FROM {_ALLOWED_ROUTES} a WHERE a.project_id = p.id) "
    f"FROM {GatewayKey._meta.db_table} k "
    f"JOIN {Project._meta.db_table} p ON p.id = k.project_id "
    # A project whose chat goes through a route has no chat connection.
    f"LEFT JOIN {ModelConnection._meta.db_table} cc ON cc.id = p.chat_connection_id "
    f"LEFT JOIN {ModelConnection._meta.db_table} ec ON ec.id = p.embedding_connection_id "
    f"LEFT JOIN {RagStore._meta.db_table} s ON s.id = p.store_id "
    f"LEFT JOIN {ModelConnection._meta.db_table} sc ON sc.id = s.embedding_connection_id "
    f"LEFT JOIN {ModelConnection._meta.db_table} rc ON rc.id = p.query_rewrite_connection_id "
    "WHERE k.key_hash = %s"
)


def row_instances(row: tuple, rows: tuple[tuple[type, str], ...] = _KEY_ROWS) -> list:
    """One model instance per table of a row of ``rows``' columns; None for a table a left join
    missed."""
    instances, start = [], 0
    for model, _ in rows:
        width = len(model._meta.concrete_fields)
        values = row[start : start + width]
        instances.append(None if values[0] is None else model.from_db(DEFAULT_DB_ALIAS, None, values))
        start += width
    return instances


async def key_by_hash(*, key_hash: str) -> GatewayKey | None:
    """The key with its project, connections and store loaded, read from the database on every
    call and never cached, so a revoked or rotated key fails on its very next request in every
    process."""
    row = await asyncdb.fetch_one(_KEY_BY_HASH, (key_hash,))
    if row is None:
        return None
    api_key, project, chat, embedder, store, store_embedder, rewriter = row_instances(row)
    if store is not None:
        store.embedding_connection = store_embedder
    project.chat_connection, project.embedding_connection, project.store = chat, embedder, store
    project.query_rewrite_connection = rewriter
    project.may_call_routes = row[-1]
    api_key.project = project
    return api_key


def route_target_keys() -> list[tuple[str, str]]:
    """Every route's name with the cooldown key of each of its targets."""
    rows = RouteTarget.objects.values_list("route__name", "connection_id", "model_name", "connection__model_name")
    return [(route, target_key(connection, model or own)) for route, connection, model, own in rows]


_ROUTE_ROWS = ((Route, "r"), (RouteTarget, "t"), (ModelConnection, "c"))
# The allowed route of a kind named by a call's `model`, else the route of the last parameter.
_NAMED_ROUTE = (
    f"SELECT {', '.join(table_columns(model, alias) for model, alias in _ROUTE_ROWS)} "
    f"FROM {Route._meta.db_table} r "
    f"JOIN {RouteTarget._meta.db_table} t ON t.route_id = r.id "
    f"JOIN {ModelConnection._meta.db_table} c ON c.id = t.connection_id "
    "WHERE r.id = COALESCE("
    f"(SELECT a.route_id FROM {_ALLOWED_ROUTES} a JOIN {Route._meta.db_table} n ON n.id = a.route_id "
    "WHERE a.project_id = %s AND n.name = %s AND n.kind = %s), %s::bigint) "
    "ORDER BY t.position"
)


async def chat_route(*, project: Project, model: str) -> tuple[Route, list[RouteTarget]] | None:
    """The chat route a `/v1` chat of ``project`` asking for ``model`` goes to, with its targets
    in order and their connections: the allowed route named ``model``, else the project's own
    chat route; None when neither (the project's chat connection answers). Read on every such
    call, so an edited route applies to the next call in every process; a project without
    routes (`may_call_routes`, read with its key) costs no statement."""
    if project.chat_route_id is None and not getattr(project, "may_call_routes", True):
        return None
    return await _route_with_targets(project=project, model=model, kind=RouteKind.CHAT, otherwise=project.chat_route_id)


async def rerank_route(*, project: Project, model: str) -> tuple[Route, list[RouteTarget]] | None:
    """The rerank route named ``model`` that ``project`` allows, or its store's rerank route when
    ``model`` names that, with its targets in order and their connections; None when neither."""
    store_route_id = None if project.store is None else project.store.rerank_route_id
    if store_route_id is None and not getattr(project, "may_call_routes", True):
        return None
    found = await _route_with_targets(project=project, model=model, kind=RouteKind.RERANK, otherwise=store_route_id)
    if found is None or found[0].name != model or found[0].kind != RouteKind.RERANK:
        return None
    return found


async def _route_with_targets(
    *, project: Project, model: str, kind: str, otherwise: int | None
) -> tuple[Route, list[RouteTarget]] | None:
    rows = await asyncdb.fetch_all(_NAMED_ROUTE, (project.pk, model, kind, otherwise))
    if not rows:
        return None
    targets = []
    for row in rows:
        route, target, connection = row_instances(row, _ROUTE_ROWS)
        target.connection = connection
        targets.append(target)
    return route, targets


_CONNECTION_ROWS = ((ModelConnection, "c"),)
_CONNECTION_BY_ID = (
    f"SELECT {table_columns(ModelConnection, 'c')} FROM {ModelConnection._meta.db_table} c WHERE c.id = %s"
)


async def store_rerank_connection(*, store: RagStore) -> ModelConnection | None:
    """The store's rerank connection, on the event loop; None when it has none (or it was deleted,
    which leaves none)."""
    if store.rerank_connection_id is None:
        return None
    row = await asyncdb.fetch_one(_CONNECTION_BY_ID, (store.rerank_connection_id,))
    return None if row is None else row_instances(row, _CONNECTION_ROWS)[0]


# The routes a project's keys may name as `model`: the one its chat goes through, its store's
# rerank route and those it allows, each once.
_ROUTES_OF_PROJECT = (
    f"SELECT r.name, r.kind, r.created_at FROM {Route._meta.db_table} r "
    f"WHERE r.id IN (%s, %s) OR r.id IN (SELECT a.route_id FROM {_ALLOWED_ROUTES} a "
    "WHERE a.project_id = %s) ORDER BY r.name"
)


@dataclass(frozen=True)
class RouteName:
    name: str
    kind: str
    created_at: datetime


async def project_route_names(*, project: Project) -> list[RouteName]:
    """The routes ``project``'s keys may call by name: its chat route, its store's rerank route
    and those it allows."""
    store_route_id = None if project.store is None else project.store.rerank_route_id
    rows = await asyncdb.fetch_all(_ROUTES_OF_PROJECT, (project.chat_route_id, store_route_id, project.pk))
    return [RouteName(*row) for row in rows]


def request_log_list(
    *,
    project_id: int | None = None,
    key_id: int | None = None,
    model: str | None = None,
    endpoint: str | None = None,
    status: tuple[int, int] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[RequestLog]:
    """The request log rows that match every filter given, newest first.

    ``status`` is an inclusive range (one status, or a class such as 400-499); ``since`` is
    inclusive and ``until`` exclusive.
    """
    logs = RequestLog.objects.order_by("-id")
    if project_id is not None:
        logs = logs.filter(project_id=project_id)
    if key_id is not None:
        logs = logs.filter(key_id=key_id)
    if model is not None:
        logs = logs.filter(model=model)
    if endpoint is not None:
        logs = logs.filter(endpoint=endpoint)
    if status is not None:
        logs = logs.filter(status_code__range=status)
    if since is not None:
        logs = logs.filter(created_at__gte=since)
    if until is not None:
        logs = logs.filter(created_at__lt=until)
    return logs


def request_log_get(*, log_id: int) -> RequestLog:
    log = RequestLog.objects.select_related("project__store", "key").filter(pk=log_id).first()
    if log is None:
        raise NotFound.of("request log")
    return log


def usage_buckets(*, since: datetime, bucket: str) -> list[dict]:
    """Requests, tokens and cost (micro-dollars) from ``since`` on, per ``bucket`` ("hour" or
    "day") that has any, oldest first: one aggregate query whatever the traffic."""
    return list(
        RequestLog.objects.filter(created_at__gte=since)
        .annotate(start=Trunc("created_at", bucket))
        .values("start")
        .annotate(
            requests=Count("id"),
            tokens=Coalesce(
                Sum(F("prompt_tokens") + F("completion_tokens") + F("embedding_tokens") + F("rerank_tokens")), 0
            ),
            cost_micros=Coalesce(Sum("cost_micros"), 0),
        )
        .order_by("start")
    )


def request_log_page(
    logs: QuerySet[RequestLog], *, before_id: int | None, limit: int
) -> tuple[list[RequestLog], int | None]:
    """One page of ``logs`` (newest first) and the id the next page continues before, if any.

    Pages are cut by id, not by offset, so rows written while a client pages never shift or
    repeat what it sees.
    """
    if before_id is not None:
        logs = logs.filter(id__lt=before_id)
    rows = list(logs[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].id
    return rows, None


def request_log_batches(logs: QuerySet[RequestLog], columns: tuple[str, ...], *, size: int) -> Iterator[list[tuple]]:
    """Every row of ``logs`` (newest first) as value tuples, one bounded query per batch."""
    before_id = None
    while True:
        batch = logs if before_id is None else logs.filter(id__lt=before_id)
        rows = list(batch.values_list("id", *columns)[:size])
        if not rows:
            return
        before_id = rows[-1][0]
        yield [row[1:] for row in rows]
        if len(rows) < size:
            return


_PRICE_FIELDS = (*PRICE_KEY_FIELDS, *RATE_FIELDS)
_PRICES_OF = f"SELECT {', '.join(_PRICE_FIELDS)} FROM {ModelPrice._meta.db_table} WHERE provider_type = ANY(%s::text[])"


async def prices_of(*, provider_types: list[str]) -> list[ModelPrice]:
    """The price rows of these providers (what a call's estimated price is read from), on the
    event loop."""
    rows = await asyncdb.fetch_all(_PRICES_OF, (provider_types,))
    return [ModelPrice(**dict(zip(_PRICE_FIELDS, row, strict=True))) for row in rows]


@dataclass(frozen=True)
class BudgetUse:
    project: str
    kind: LimitKind
    used: int
    budget: int


def project_budgets_used(*, now: datetime) -> list[BudgetUse]:
    """Every budget a project has configured, with what the project has spent in the budget's
    current window (settled calls; the reservations of calls in flight are not spending yet)."""
    fields = Q()
    for kind in BUDGETS:
        fields |= Q(**{f"{kind.field}__gt": 0})
    projects = list(Project.objects.filter(fields).order_by("name"))
    starts = {kind.period: window_start(kind.period, now) for kind in BUDGETS}
    counters = {
        (counter.owner_id, counter.period): counter
        for counter in UsageCounter.objects.filter(
            tier=PROJECT,
            owner_id__in=[project.pk for project in projects],
            period__in=list(starts),
            period_start__in=list(starts.values()),
        )
        if counter.period_start == starts[counter.period]
    }
    uses = []
    for project in projects:
        for kind in BUDGETS:
            budget = getattr(project, kind.field)
            if not budget:
                continue
            counter = counters.get((project.pk, kind.period))
            if counter is None:
                used = 0
            elif kind.column == MICROS:
                used = counter.cost_micros
            else:
                used = counter.prompt_tokens + counter.completion_tokens
            uses.append(BudgetUse(project.name, kind, used, budget))
    return uses


@dataclass(frozen=True)
class Stored:
    """A stored `/v1/responses` answer: the conversation before it, its input items, itself."""

    history: list[dict]
    input_items: list[dict]
    response: dict


_STORED_RESPONSE = (
    f"SELECT history, input_items, response FROM {StoredResponse._meta.db_table} WHERE id = %s AND project_id = %s"
)


async def stored_response(*, project: Project, response_id: str) -> Stored:
    """The project's stored response of that id; NotFound for any other project's, as for none."""
    row = None
    if is_response_id(response_id):
        row = await asyncdb.fetch_one(_STORED_RESPONSE, (response_id, project.pk))
    if row is None:
        raise NotFound(f"no response with id {response_id[:80]!r}")
    return Stored(*row)
