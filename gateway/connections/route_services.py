"""Services that write routes: a name over several connections, its targets in order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial

from django.db import transaction

from gateway.connections import selectors
from gateway.connections.models import (
    MAX_ROUTE_TARGETS,
    Route,
    RouteKind,
    RouteStrategy,
    RouteTarget,
    why_route_cannot_use,
)
from gateway.connections.services import MODEL_NAME, MODEL_NAME_RULE, NAME_CHARACTERS
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput

ROUTE_NAME = re.compile(rf"^[A-Za-z0-9][{NAME_CHARACTERS}]{{0,{Route._meta.get_field('name').max_length - 1}}}$")
AUDITED_ROUTE_FIELDS = ("name", "kind", "strategy")
# A target as the trail keeps it, in the route's order.
AUDITED_TARGET_FIELDS = ("connection_id", "model_name", "weight", "first_byte_timeout")

_audit_route = partial(audit_change, object_type="route")


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
