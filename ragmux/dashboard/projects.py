"""The dashboard's pages for projects and their gateway keys: every role reads them, admins
change them through the services the JSON API uses, validated by the API's own inputs.

A key's secret exists only in the response that creates or rotates it: those forms answer with
the project's page itself rather than a redirect, so the secret never passes through a flash
message, the session or its cookie."""

from __future__ import annotations

from functools import partial

from django.contrib import messages
from django.shortcuts import redirect, render

from gateway.clients import selectors, services
from gateway.clients.models import Scope
from gateway.clients.serializers import KeyInput, ProjectInput
from gateway.connections.models import Capability, why_cannot
from gateway.connections.selectors import connection_list
from ragmux.dashboard.access import page
from ragmux.dashboard.forms import Form
from stores.selectors import store_list

PROJECT_FIELDS = ("name", "chat_connection_id", "embedding_connection_id", "store_id", "system_prompt")
OPTIONAL_IDS = ("embedding_connection_id", "store_id")
KEY_FIELDS = ("name", "expires_at")


def _project_input(form: Form) -> dict:
    data = {name: form.values.get(name) or "" for name in PROJECT_FIELDS}
    for name in OPTIONAL_IDS:
        data[name] = data[name] or None
    return data


def _project_form_page(request, form: Form, *, project=None):
    connections = list(connection_list())
    return render(
        request,
        "dashboard/project_form.html",
        {
            "form": form,
            "project": project,
            "chat_connections": [c for c in connections if why_cannot(c, Capability.CHAT) is None],
            "embedding_connections": [c for c in connections if why_cannot(c, Capability.EMBED) is None],
            "stores": list(store_list()),
        },
        status=400 if form.errors else 200,
    )


@page("viewer")
def projects(request):
    rows = selectors.project_list().select_related("chat_connection", "embedding_connection", "store")
    return render(request, "dashboard/projects.html", {"projects": list(rows)})


@page("admin", methods=("GET", "POST"))
def project_create(request):
    form = Form(request, names=PROJECT_FIELDS)
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
    saved = {name: getattr(project, name) for name in PROJECT_FIELDS}
    form = Form(request, names=PROJECT_FIELDS, initial=saved)
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


def _project_page(request, project, *, key_form: Form | None = None, issued=None, status: int = 200):
    return render(
        request,
        "dashboard/project.html",
        {
            "project": project,
            "keys": list(selectors.key_list(project=project)),
            "key_form": key_form or Form(names=KEY_FIELDS, initial={"scopes": Scope.values}),
            "scopes": Scope.values,
            "issued": issued,
        },
        status=status,
    )


@page("viewer")
def project_detail(request, project_id: int):
    project = selectors.project_get(project_id=project_id)
    return _project_page(request, project)


@page("admin", methods=("POST",))
def key_create(request, project_id: int):
    project = selectors.project_get(project_id=project_id)
    form = Form(request, names=KEY_FIELDS, lists=("scopes",))
    data = {**form.values, "expires_at": form.values["expires_at"] or None}
    if form.submit(KeyInput, data, partial(services.key_create, project=project, actor=request.user)):
        return _project_page(request, project, issued=form.result, status=201)
    messages.error(request, "The key was not created: see the messages beside the fields.")
    return _project_page(request, project, key_form=form, status=400)


@page("admin", methods=("POST",))
def key_rotate(request, key_id: int):
    issued = services.key_rotate(api_key=selectors.key_get(key_id=key_id), actor=request.user)
    return _project_page(request, issued.api_key.project, issued=issued)


@page("admin", methods=("POST",))
def key_revoke(request, key_id: int):
    api_key = selectors.key_get(key_id=key_id)
    services.key_revoke(api_key=api_key, actor=request.user)
    messages.success(request, f"Revoked the key “{api_key.name}”: it stops working at its next request.")
    return redirect("dashboard:project", api_key.project_id)
