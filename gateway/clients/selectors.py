"""Reads of projects, gateway keys and the request log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Trunc

from gateway.clients.limits import BUDGETS, MICROS, PROJECT, LimitKind, window_start
from gateway.clients.models import GatewayKey, Project, RequestLog, UsageCounter
from gateway.connections.models import PRICE_KEY_FIELDS, TOKEN_RATE_FIELDS, ModelConnection, ModelPrice
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


def _columns(model, alias: str) -> str:
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
)
_KEY_BY_HASH = (
    f"SELECT {', '.join(_columns(model, alias) for model, alias in _KEY_ROWS)} "
    f"FROM {GatewayKey._meta.db_table} k "
    f"JOIN {Project._meta.db_table} p ON p.id = k.project_id "
    f"JOIN {ModelConnection._meta.db_table} cc ON cc.id = p.chat_connection_id "
    f"LEFT JOIN {ModelConnection._meta.db_table} ec ON ec.id = p.embedding_connection_id "
    f"LEFT JOIN {RagStore._meta.db_table} s ON s.id = p.store_id "
    f"LEFT JOIN {ModelConnection._meta.db_table} sc ON sc.id = s.embedding_connection_id "
    "WHERE k.key_hash = %s"
)


def _instances(row: tuple) -> list:
    """One model instance per table of a _KEY_BY_HASH row; None for a table the left join missed."""
    instances, start = [], 0
    for model, _ in _KEY_ROWS:
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
    api_key, project, chat, embedder, store, store_embedder = _instances(row)
    if store is not None:
        store.embedding_connection = store_embedder
    project.chat_connection, project.embedding_connection, project.store = chat, embedder, store
    api_key.project = project
    return api_key


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
            tokens=Coalesce(Sum(F("prompt_tokens") + F("completion_tokens") + F("embedding_tokens")), 0),
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


_PRICE_FIELDS = (*PRICE_KEY_FIELDS, *TOKEN_RATE_FIELDS)
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
