"""The dashboard's pages for routes: every role reads them, admins create, edit and delete them
through the services the JSON API uses, validated by the API's own input.

A route's targets are rows of inputs, one per target and an empty one to add another; "Add a
target" posts the form back with one row more (no JavaScript needed), saving nothing. A row
without a connection is no target."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse

from gateway.clients import selectors as client_selectors
from gateway.clients import services as client_services
from gateway.connections import route_services, selectors
from gateway.connections.models import MAX_ROUTE_TARGETS, ROUTE_TARGET_PROVIDERS, Route, RouteKind, RouteStrategy
from gateway.connections.serializers import RouteInput
from ragmux.core.errors import status_for
from ragmux.dashboard.access import page
from ragmux.dashboard.forms import Form, attempt

ROUTE_FIELDS = ("name", "kind", "strategy")
# A target row's inputs, by the API field each one fills.
TARGET_INPUTS = {
    "connection_id": "target_connection",
    "model_name": "target_model",
    "weight": "target_weight",
    "first_byte_timeout": "target_timeout",
}
ROUTABLE_PROVIDERS = frozenset().union(*ROUTE_TARGET_PROVIDERS.values())
# Empty rows a form offers beyond the route's targets, to add more.
SPARE_ROWS = 2
# The hidden input saying how many rows the form showed, and the button asking for one more.
ROWS_SHOWN = "target_rows"
ADD_ROW = "add_target"


@dataclass(frozen=True)
class TargetRow:
    """One row of target inputs as the template shows it."""

    index: int
    values: dict[str, str]
    # Messages by the API field of the input they go under.
    errors: dict[str, list[str]]

    @property
    def number(self) -> int:
        return self.index + 1


def _row_names(index: int) -> list[str]:
    return [f"{name}_{index}" for name in TARGET_INPUTS.values()]


def _form(request=None, *, initial: dict | None = None) -> Form:
    names = [
        *ROUTE_FIELDS,
        ROWS_SHOWN,
        *(name for index in range(MAX_ROUTE_TARGETS) for name in _row_names(index)),
    ]
    return Form(request, names=names, initial=initial)


def _route_input(form: Form) -> dict:
    """The route as the API takes it: the filled rows in order. A refusal of the n-th target
    (`targets[n].weight`) is put under the input it names in the row it came from, a refusal of
    the whole target (`targets.n`) under the row's connection."""
    targets, rows = [], {}
    for index in range(MAX_ROUTE_TARGETS):
        row = {field: str(form.values.get(f"{name}_{index}") or "").strip() for field, name in TARGET_INPUTS.items()}
        if not row["connection_id"]:
            continue
        row["weight"] = row["weight"] or "1"
        row["first_byte_timeout"] = row["first_byte_timeout"] or None
        position = str(len(targets))
        rows[position] = f"target_connection_{index}"
        rows.update({f"{position}.{field}": f"{name}_{index}" for field, name in TARGET_INPUTS.items()})
        targets.append(row)
    form.nested = {"targets": rows or {"0": "target_connection_0"}}
    return {**{name: form.values.get(name) or "" for name in ROUTE_FIELDS}, "targets": targets}


def _target_rows(form: Form, *, more: int = 0) -> list[TargetRow]:
    """The rows the form shows: every filled one and spare ones, as many as it showed before
    (``more`` added), at most a route's targets."""
    shown = str(form.values.get(ROWS_SHOWN) or "")
    count = max(_filled_rows(form) + SPARE_ROWS, int(shown) if shown.isdigit() else 0) + more
    return [
        TargetRow(
            index=index,
            values={field: form.values.get(f"{name}_{index}") or "" for field, name in TARGET_INPUTS.items()},
            errors={field: form.errors.get(f"{name}_{index}", []) for field, name in TARGET_INPUTS.items()},
        )
        for index in range(min(MAX_ROUTE_TARGETS, count))
    ]


def _filled_rows(form: Form) -> int:
    filled = [i for i in range(MAX_ROUTE_TARGETS) if form.values.get(f"target_connection_{i}")]
    return max(filled) + 1 if filled else 0


def _saved_values(route: Route) -> dict:
    values = {name: getattr(route, name) for name in ROUTE_FIELDS}
    for target in route.targets.all():
        values.update(
            {
                f"target_connection_{target.position}": str(target.connection_id),
                f"target_model_{target.position}": target.model_name,
                f"target_weight_{target.position}": str(target.weight),
                f"target_timeout_{target.position}": ""
                if target.first_byte_timeout is None
                else f"{target.first_byte_timeout:g}",
            }
        )
    return values


def _route_form_page(request, form: Form, *, route: Route | None = None):
    rows = _target_rows(form, more=int(ADD_ROW in request.POST))
    return render(
        request,
        "dashboard/route_form.html",
        {
            "form": form,
            "route": route,
            "kinds": RouteKind.values,
            "strategies": RouteStrategy.values,
            "rows": rows,
            "rows_shown": ROWS_SHOWN,
            "add_row": ADD_ROW,
            "can_add_row": len(rows) < MAX_ROUTE_TARGETS,
            # Any connection a route of some kind may use; the service names one that does not fit.
            "connections": [c for c in selectors.connection_list() if c.provider_type in ROUTABLE_PROVIDERS],
            "max_targets": MAX_ROUTE_TARGETS,
        },
        status=400 if form.errors else 200,
    )


@page("viewer")
def routes(request):
    return render(
        request,
        "dashboard/routes.html",
        {
            "routes": list(selectors.route_list().prefetch_related("allowed_projects")),
            "projects": list(client_selectors.project_list()),
        },
    )


def _allowed_message(route: Route) -> str:
    """What is true of a route's callers, said where it is created or allowed."""
    names = ", ".join(f"“{project.name}”" for project in route.allowed_projects.order_by("name"))
    if not names:
        return (
            f"No project may send “{route.name}” as model yet: until a project allows it, a call naming it is "
            "answered by the project's own chat model. Allow it on a project below."
        )
    return f"Keys of {names} may send “{route.name}” as model; it is listed in their /v1/models."


@page("admin", methods=("POST",), shown_on=lambda route_id: reverse("dashboard:routes"))
def route_allow(request, route_id: int):
    route = selectors.route_get(route_id=route_id)
    project_id = request.POST.get("project", "")
    if not project_id.isdigit():
        messages.error(request, f"Choose the project that may send “{route.name}” as model.")
        return redirect("dashboard:routes")
    project = client_selectors.project_get(project_id=int(project_id))
    client_services.project_route_allow(project=project, route=route, actor=request.user)
    messages.success(request, _allowed_message(route))
    return redirect("dashboard:routes")


@page("admin", methods=("GET", "POST"))
def route_create(request):
    form = _form(request, initial={"kind": RouteKind.CHAT, "strategy": RouteStrategy.ORDERED})
    if request.method == "POST" and ADD_ROW not in request.POST:
        if form.submit(RouteInput, _route_input(form), partial(route_services.route_create, actor=request.user)):
            messages.success(request, f"Created the route “{form.result.name}”. {_allowed_message(form.result)}")
            return redirect("dashboard:routes")
        messages.error(request, "The route was not created: see the messages beside the fields.")
    return _route_form_page(request, form)


@page("admin", methods=("GET", "POST"))
def route_edit(request, route_id: int):
    route = selectors.route_get(route_id=route_id)
    form = _form(request, initial=_saved_values(route))
    if request.method == "POST" and ADD_ROW not in request.POST:
        save = partial(route_services.route_update, route=route, actor=request.user)
        if form.submit(RouteInput, _route_input(form), save):
            messages.success(request, f"Saved the route “{form.result.name}”.")
            return redirect("dashboard:routes")
        messages.error(request, "The route was not saved: see the messages beside the fields.")
    return _route_form_page(request, form, route=route)


@page("admin", methods=("GET", "POST"))
def route_delete(request, route_id: int):
    route = selectors.route_get(route_id=route_id)
    if request.method == "POST":
        refusal = attempt(lambda: route_services.route_delete(route=route, actor=request.user)).refusal
        if refusal is not None:
            messages.error(request, f"The route “{route.name}” was not deleted: {refusal.message}.")
            return render(
                request, "dashboard/route_delete.html", {"route": route, "refusal": refusal}, status=status_for(refusal)
            )
        messages.success(request, f"Deleted the route “{route.name}”.")
        return redirect("dashboard:routes")
    return render(request, "dashboard/route_delete.html", {"route": route})
