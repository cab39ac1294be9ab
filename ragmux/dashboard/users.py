"""The dashboard's pages for users (admins), a user's own password, the audit trail and the
sign-ins the limiter refused (admins). They call the account services and the selectors the
JSON API calls, and validate with its inputs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlencode

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse

from ragmux.core import accounts
from ragmux.core.audit import OBJECT_TYPES
from ragmux.core.authentication import change_own_password
from ragmux.core.errors import status_for
from ragmux.core.models import AuditEntry
from ragmux.core.paging import FIRST_PAGE
from ragmux.core.roles import ROLES
from ragmux.core.serializers import (
    AuditQuery,
    PasswordChangeInput,
    PasswordResetInput,
    UserCreateInput,
    UserUpdateInput,
    audit_entries,
)
from ragmux.core.signin import sign_in_report
from ragmux.dashboard import once
from ragmux.dashboard.access import page
from ragmux.dashboard.forms import Form
from ragmux.dashboard.pager import pager

USER_CREATE_FIELDS = ("username", "role", "password")
USER_UPDATE_FIELDS = ("role", "is_active")


def _users_page(request, form: Form, *, status: int = 200, created=None, generated: str | None = None):
    return render(
        request,
        "dashboard/users.html",
        {
            "users": [(user, accounts.stored_role(user)) for user in accounts.user_list()],
            "form": form,
            "roles": ROLES,
            "created": created,
            "generated": generated,
            "once": once.new_token(),
        },
        status=status,
    )


@page("admin")
def users(request):
    return _users_page(request, Form(names=USER_CREATE_FIELDS, initial={"role": "viewer"}))


def _users_address() -> str:
    return reverse("dashboard:users")


def _user_address(user_id: int) -> str:
    return reverse("dashboard:user", args=[user_id])


# What a form whose answer showed a generated password says when it is sent again.
PASSWORD_SHOWN = "; a generated password is shown only once."


@page("admin", methods=("POST",), shown_on=_users_address)
def user_create(request):
    status = once.refused(request, again="This user was already created" + PASSWORD_SHOWN)
    if status is not None:
        return _users_page(request, Form(names=USER_CREATE_FIELDS, initial={"role": "viewer"}), status=status)
    form = Form(request, names=USER_CREATE_FIELDS)
    if form.submit(UserCreateInput, form.values, partial(accounts.user_create, actor=request.user), field="username"):
        once.spend_token(request)
        user, generated = form.result
        messages.success(request, f"Created the {form.data['role']} “{user.username}”.")
        if generated:
            # Shown on this page only, never stored in a message or a cookie.
            return _users_page(request, Form(names=USER_CREATE_FIELDS), created=user, generated=generated)
        return redirect("dashboard:users")
    form.values["password"] = ""
    messages.error(request, "The user was not created: see the messages beside the fields.")
    return _users_page(request, form, status=400)


def _user_page(request, user, *, status: int = 200, password_form: Form | None = None, generated: str | None = None):
    return render(
        request,
        "dashboard/user.html",
        {
            "subject": user,
            "role": accounts.stored_role(user),
            "roles": ROLES,
            "password_form": password_form or Form(names=("password",)),
            "generated": generated,
            "is_self": user.pk == request.user.pk,
            "once": once.new_token(),
        },
        status=status,
    )


@page("admin")
def user_detail(request, user_id: int):
    return _user_page(request, accounts.user_get(user_id))


@page("admin", methods=("POST",), shown_on=_user_address)
def user_update(request, user_id: int):
    """The role form, and the deactivate and reactivate buttons."""
    user = accounts.user_get(user_id)
    form = Form(request, names=USER_UPDATE_FIELDS)
    # Each button sends one of the two: what is not sent stays as it is.
    changes = {name: value for name, value in form.values.items() if value}
    if not form.submit(UserUpdateInput, changes, partial(accounts.user_update, user=user, actor=request.user)):
        messages.error(request, f"“{user.username}” was not changed: {form.problems}.")
        return _user_page(request, user, status=status_for(form.refusal) if form.refusal else 400)
    user = form.result
    state = "active" if user.is_active else "deactivated, and signed out everywhere"
    messages.success(request, f"“{user.username}” is now {accounts.stored_role(user)}, {state}.")
    return redirect("dashboard:user", user.pk)


@page("admin", methods=("POST",), shown_on=_user_address)
def user_password(request, user_id: int):
    user = accounts.user_get(user_id)
    status = once.refused(request, again="This password was already reset" + PASSWORD_SHOWN)
    if status is not None:
        return _user_page(request, user, status=status)
    form = Form(request, names=("password",))
    reset = partial(accounts.user_reset_password, user=user, actor=request.user)
    if form.submit(PasswordResetInput, form.values, reset, field="password"):
        once.spend_token(request)
        messages.success(request, f"Reset the password of “{user.username}”; their sessions have ended.")
        if form.result:
            return _user_page(request, user, generated=form.result)
        return redirect("dashboard:user", user.pk)
    form.values["password"] = ""
    messages.error(request, "The password was not reset: see the message beside the field.")
    return _user_page(request, user, password_form=form, status=400)


PASSWORD_CHANGE_FIELDS = ("current_password", "new_password", "confirm_password")


@page("viewer", methods=("GET", "POST"))
def account_password(request):
    form = Form(request, names=PASSWORD_CHANGE_FIELDS)
    if request.method == "POST":
        data = form.validated(
            PasswordChangeInput, {name: form.values[name] for name in ("current_password", "new_password")}
        )
        if data is not None and data["new_password"] != form.values["confirm_password"]:
            form.error("confirm_password", "The two new passwords differ.")
        elif data is not None and form.run(lambda: change_own_password(request, **data)):
            messages.success(request, "Changed your password; your other sessions have ended.")
            return redirect("dashboard:overview")
        messages.error(request, "Your password was not changed: see the messages beside the fields.")
    form.values = {}  # passwords are never sent back
    return render(request, "dashboard/account_password.html", {"form": form}, status=400 if form.errors else 200)


# --- the audit trail --------------------------------------------------------------------------


@dataclass
class Change:
    name: str
    before: object
    after: object
    # An entry with no "before" (a creation, a reprocess) says what is, not what changed.
    only_after: bool = False


def _shown(value: object) -> object:
    """A value as the trail's page shows it: a list or an object (a route's targets) as JSON,
    not as Python writes it (keys sorted: the database keeps no order)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True) if isinstance(value, (list, dict)) else value


def changes(entry: AuditEntry) -> list[Change]:
    names = list(dict.fromkeys([*entry.before, *entry.after]))
    only_after = not entry.before
    return [
        Change(name, _shown(entry.before.get(name, "—")), _shown(entry.after.get(name, "—")), only_after)
        for name in names
    ]


AUDIT_FILTERS = ("actor", "action", "object_type", "object_id", "document", "since", "until")


@page("admin")
def audit(request):
    form = Form.filters(request, names=AUDIT_FILTERS)
    query = form.filled
    data = form.validated(AuditQuery, {**query, "page": request.GET.get("page") or 1})
    # Refused filters list nothing: one empty page.
    rows = audit_entries(data) if data is not None else []
    entries = pager(rows, data or FIRST_PAGE, address=reverse("dashboard:audit"), filters=query)
    return render(
        request,
        "dashboard/audit.html",
        {
            "form": form,
            "entries": [(entry, changes(entry)) for entry in entries.rows],
            "pager": entries,
            "object_types": OBJECT_TYPES,
            # The export takes the same filters; it has no pages.
            "ndjson": "/admin/api/audit.ndjson" + ("?" + urlencode(query) if query else ""),
        },
        status=400 if form.errors else 200,
    )


@page("admin")
def sign_ins(request):
    return render(request, "dashboard/sign_ins.html", {"report": sign_in_report()})
