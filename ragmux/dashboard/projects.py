"""The dashboard's pages for projects and their gateway keys: every role reads them, admins
change them through the services the JSON API uses, validated by the API's own inputs.

A key's secret exists only in the response that creates or rotates it: those forms answer with
the project's page itself rather than a redirect, so the secret never passes through a flash
message, the session or its cookie."""

from __future__ import annotations

import json
from datetime import UTC
from functools import partial

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse

from gateway.clients import selectors, services
from gateway.clients.models import QueryRewrite, Scope, SpendLimits
from gateway.clients.serializers import API_LIMIT_FIELDS, KeyInput, LimitsInput, ProjectInput
from gateway.connections.models import Capability, RouteKind, why_cannot
from gateway.connections.selectors import connection_list, route_list
from ragmux.core.serializers import MicroDollarsField
from ragmux.core.units import micros_to_dollars
from ragmux.dashboard import once
from ragmux.dashboard.access import page
from ragmux.dashboard.connections import figure
from ragmux.dashboard.filters import dollars, number
from ragmux.dashboard.forms import Form, json_input
from ragmux.dashboard.spend import project_spend
from stores.selectors import store_list

# `chat` is one choice among the chat connections and the chat routes: `connection:<id>` or
# `route:<id>`, which become the API's `chat_connection_id` or `chat_route_id`.
PROJECT_FIELDS = (
    "name",
    "chat",
    "embedding_connection_id",
    "store_id",
    "system_prompt",
    "query_rewrite",
    "query_rewrite_connection_id",
)
PROJECT_LISTS = ("allowed_route_ids",)
CHAT_CHOICES = {"connection": "chat_connection_id", "route": "chat_route_id"}
OPTIONAL_IDS = ("embedding_connection_id", "store_id", "query_rewrite_connection_id")
KEY_FIELDS = ("name", "expires_at", "filters")
KEY_EDIT_FIELDS = (*KEY_FIELDS, *API_LIMIT_FIELDS)
# What each limit is called on the pages, in the API's order.
LIMIT_LABELS = dict(
    zip(
        API_LIMIT_FIELDS,
        (
            "Requests a minute",
            "Tokens a minute",
            "Tokens a day",
            "Tokens a month",
            "Dollars a day",
            "Dollars a month",
        ),
        strict=True,
    )
)
# A `datetime-local` input's value.
LOCAL_MINUTE = "%Y-%m-%dT%H:%M"


def limit_values(target: SpendLimits) -> dict[str, str]:
    """Each limit of a project or key as its input shows it: a whole number, or dollars as typed
    ("2.5", not micro-dollars)."""
    values = {}
    for name, field in LimitsInput().fields.items():
        stored = getattr(target, field.source)
        values[name] = figure(micros_to_dollars(stored)) if isinstance(field, MicroDollarsField) else str(stored)
    return values


def limit_facts(target: SpendLimits, *, only_set: bool = False) -> list[tuple[str, str]]:
    """Each limit's label and value as the pages say it ("no limit" for 0, left out when
    ``only_set``)."""
    facts = []
    for name, field in LimitsInput().fields.items():
        stored = getattr(target, field.source)
        if not stored:
            if only_set:
                continue
            shown = "no limit"
        else:
            shown = dollars(stored) if isinstance(field, MicroDollarsField) else number(stored)
        facts.append((LIMIT_LABELS[name], shown))
    return facts


def limit_inputs(form: Form) -> list[dict]:
    """The limit inputs of a form, each with its label, value and messages."""
    return [
        {
            "name": name,
            "label": label,
            "value": form.values.get(name),
            "errors": form.errors.get(name),
            "inputmode": "decimal" if name.endswith("_usd") else "numeric",
        }
        for name, label in LIMIT_LABELS.items()
    ]


def _limits_input(form: Form) -> dict:
    """The limit inputs of a form; an emptied one is no limit."""
    return {name: str(form.values.get(name) or "").strip() or "0" for name in API_LIMIT_FIELDS}


def _project_form(request=None, *, initial: dict | None = None) -> Form:
    # A refusal of either chat field is shown beside the one choice.
    chat = {field: {"": "chat"} for field in CHAT_CHOICES.values()}
    return Form(request, names=PROJECT_FIELDS, lists=PROJECT_LISTS, initial=initial, nested=chat)


def _saved_project(project) -> dict:
    chat = f"route:{project.chat_route_id}" if project.chat_route_id else f"connection:{project.chat_connection_id}"
    return {
        **{name: getattr(project, name) for name in PROJECT_FIELDS if name != "chat"},
        "chat": chat,
        "allowed_route_ids": [str(pk) for pk in project.allowed_routes.values_list("pk", flat=True)],
    }


def _project_input(form: Form) -> dict:
    data = {name: form.values.get(name) or "" for name in PROJECT_FIELDS if name != "chat"}
    for name in OPTIONAL_IDS:
        data[name] = data[name] or None
    kind, _, chosen = str(form.values.get("chat") or "").partition(":")
    for choice, field in CHAT_CHOICES.items():
        data[field] = chosen if kind == choice else None
    data["allowed_route_ids"] = form.values.get("allowed_route_ids") or []
    data["query_rewrite"] = data["query_rewrite"] or QueryRewrite.OFF
    return data


def _project_form_page(request, form: Form, *, project=None):
    connections = list(connection_list())
    chat_connections = [c for c in connections if why_cannot(c, Capability.CHAT) is None]
    return render(
        request,
        "dashboard/project_form.html",
        {
            "form": form,
            "project": project,
            "chat_groups": [
                ("Connections", [(f"connection:{c.pk}", c.name) for c in chat_connections]),
                ("Routes", [(f"route:{r.pk}", f"{r.name} ({r.strategy})") for r in route_list(kind=RouteKind.CHAT)]),
            ],
            "routes": list(route_list()),
            "allowed": {str(pk) for pk in form.values.get("allowed_route_ids") or []},
            "embedding_connections": [c for c in connections if why_cannot(c, Capability.EMBED) is None],
            "stores": list(store_list()),
            "query_rewrite_choices": [{"pk": value, "name": label} for value, label in QueryRewrite.choices],
            "chat_connections": chat_connections,
        },
        status=400 if form.errors else 200,
    )


@page("viewer")
def projects(request):
    rows = (
        selectors.project_list()
        .select_related("chat_connection", "chat_route", "embedding_connection", "store")
        .prefetch_related("chat_route__targets", "allowed_routes")
    )
    return render(request, "dashboard/projects.html", {"projects": list(rows)})


@page("admin", methods=("GET", "POST"))
def project_create(request):
    form = _project_form(request)
    if request.method == "POST":
        if form.submit(ProjectInput, _project_input(form), partial(services.project_create, actor=request.user)):
            project = form.result
            messages.success(request, f"Created the project “{project.name}”. Create a key for it below.")
            return redirect("dashboard:project", project.pk)
        messages.error(request, "The project was not created: see the messages beside the fields.")
    return _project_form_page(request, form)


@page("admin", methods=("GET", "POST"))
def project_edit(request, project_id: int):
    project = selectors.project_get(project_id=project_id)
    form = _project_form(request, initial=_saved_project(project))
    if request.method == "POST":
        save = partial(services.project_update, project=project, actor=request.user)
        if form.submit(ProjectInput, _project_input(form), save):
            updated = form.result
            messages.success(request, f"Saved the project “{updated.name}”.")
            return redirect("dashboard:project", updated.pk)
        messages.error(request, "The project was not saved: see the messages beside the fields.")
    return _project_form_page(request, form, project=project)


@page("admin", methods=("GET", "POST"))
def project_delete(request, project_id: int):
    project = selectors.project_get(project_id=project_id)
    if request.method == "POST":
        services.project_delete(project=project, actor=request.user)
        messages.success(request, f"Deleted the project “{project.name}”, its keys and its request log.")
        return redirect("dashboard:projects")
    return render(request, "dashboard/project_delete.html", {"project": project})


def _project_page(
    request, project, *, key_form: Form | None = None, limits_form: Form | None = None, issued=None, status: int = 200
):
    limits_form = limits_form or Form(names=API_LIMIT_FIELDS, initial=limit_values(project))
    return render(
        request,
        "dashboard/project.html",
        {
            "project": project,
            "spend": project_spend(project),
            "limits": limit_facts(project),
            "limits_form": limits_form,
            "limit_inputs": limit_inputs(limits_form),
            "keys": [(api_key, limit_facts(api_key, only_set=True)) for api_key in selectors.key_list(project=project)],
            "key_form": key_form or Form(names=KEY_FIELDS, initial={"scopes": Scope.values}),
            "scopes": Scope.values,
            "issued": issued,
            "once": once.new_token(),
        },
        status=status,
    )


def _project_address(project_id: int) -> str:
    return reverse("dashboard:project", args=[project_id])


def _key_project_address(key_id: int) -> str:
    return _project_address(selectors.key_get(key_id=key_id).project_id)


@page("viewer")
def project_detail(request, project_id: int):
    project = selectors.project_get(project_id=project_id)
    return _project_page(request, project)


@page("admin", methods=("POST",), shown_on=_project_address)
def project_limits(request, project_id: int):
    project = selectors.project_get(project_id=project_id)
    form = Form(request, names=API_LIMIT_FIELDS)
    save = partial(services.project_update, project=project, actor=request.user)
    if form.submit(ProjectInput, _limits_input(form), save, partial=True):
        messages.success(request, f"Saved the limits of the project “{project.name}”.")
        return redirect("dashboard:project", project.pk)
    messages.error(request, "The limits were not saved: see the messages beside the fields.")
    return _project_page(request, project, limits_form=form, status=400)


@page("admin", methods=("POST",), shown_on=_project_address)
def key_create(request, project_id: int):
    project = selectors.project_get(project_id=project_id)
    status = once.refused(request, again="This key was already created; it is shown only once.")
    if status is not None:
        return _project_page(request, project, status=status)
    form = Form(request, names=KEY_FIELDS, lists=("scopes",))
    data = {
        **form.values,
        "expires_at": form.values["expires_at"] or None,
        "filters": json_input(form.values["filters"]),
    }
    if form.submit(KeyInput, data, partial(services.key_create, project=project, actor=request.user)):
        once.spend_token(request)
        return _project_page(request, project, issued=form.result, status=201)
    messages.error(request, "The key was not created: see the messages beside the fields.")
    return _project_page(request, project, key_form=form, status=400)


@page("admin", methods=("POST",), shown_on=_key_project_address)
def key_rotate(request, key_id: int):
    api_key = selectors.key_get(key_id=key_id)
    status = once.refused(request, again="This key was already rotated; its new secret is shown only once.")
    if status is not None:
        return _project_page(request, api_key.project, status=status)
    issued = services.key_rotate(api_key=api_key, actor=request.user)
    once.spend_token(request)
    return _project_page(request, issued.api_key.project, issued=issued)


@page("admin", methods=("POST",), shown_on=_key_project_address)
def key_revoke(request, key_id: int):
    api_key = selectors.key_get(key_id=key_id)
    services.key_revoke(api_key=api_key, actor=request.user)
    messages.success(request, f"Revoked the key “{api_key.name}”: it stops working at its next request.")
    return redirect("dashboard:project", api_key.project_id)


@page("admin", methods=("GET", "POST"))
def key_edit(request, key_id: int):
    """A key's name, scopes, expiry and limits; its secret stays."""
    api_key = selectors.key_get(key_id=key_id)
    expires = api_key.expires_at.astimezone(UTC).strftime(LOCAL_MINUTE) if api_key.expires_at else ""
    scope = json.dumps(api_key.filters) if api_key.filters is not None else ""
    saved = {"name": api_key.name, "scopes": api_key.scopes, "expires_at": expires, "filters": scope}
    saved.update(limit_values(api_key))
    form = Form(request, names=KEY_EDIT_FIELDS, lists=("scopes",), initial=saved)
    if request.method == "POST":
        data = {
            "name": form.values["name"],
            "scopes": form.values["scopes"],
            "expires_at": form.values["expires_at"] or None,
            "filters": json_input(form.values["filters"]),
            **_limits_input(form),
        }
        save = partial(services.key_update, api_key=api_key, actor=request.user)
        if form.submit(KeyInput, data, save, partial=True):
            messages.success(request, f"Saved the key “{form.result.name}”.")
            return redirect("dashboard:project", api_key.project_id)
        messages.error(request, "The key was not saved: see the messages beside the fields.")
    return render(
        request,
        "dashboard/key_form.html",
        {"api_key": api_key, "form": form, "scopes": Scope.values, "limit_inputs": limit_inputs(form)},
        status=400 if form.errors else 200,
    )
