"""Services for dashboard users: creating them, their role, their password, deactivating them,
and ending their sessions. Each change is written to the audit trail with its actor (None for
the CLI and start-up, which the trail shows as "system")."""

from __future__ import annotations

import secrets
from functools import partial

from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ragmux.core.audit import MASKED, audit_change
from ragmux.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from ragmux.core.models import AdminToken
from ragmux.core.roles import ROLES, role_rank

OBJECT_TYPE = "user"
_audit = partial(audit_change, object_type=OBJECT_TYPE)


class UserExists(Conflict):
    code = "duplicate_name"


def stored_role(user: User) -> str | None:
    """The role the account holds, active or not (`roles.user_role` is None for inactive users)."""
    if user.is_superuser:
        return "admin"
    names = {group.name for group in user.groups.all()}
    return next((role for role in reversed(ROLES) if role in names), None)


def user_list():
    return User.objects.prefetch_related("groups").order_by("username")


def user_get(user_id: int) -> User:
    user = User.objects.prefetch_related("groups").filter(pk=user_id).first()
    if user is None:
        raise NotFound.of("user")
    return user


def _state(user: User) -> dict:
    return {"username": user.username, "role": stored_role(user), "is_active": user.is_active}


def _checked_password(password: str, user: User, *, field: str = "password") -> str:
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise InvalidInput(" ".join(exc.messages), field=field) from None
    return password


def _checked_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}", field="role")
    return role


def _set_role(user: User, role: str) -> None:
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    # A superuser is an admin whatever its groups say, so a demotion must take that away too.
    user.is_superuser = user.is_superuser and role == "admin"
    # `roles.user_role` remembers the role on the object for the rest of the request.
    vars(user).pop("_ragmux_role", None)


@transaction.atomic
def user_create(*, username: str, password: str | None, role: str, actor=None) -> tuple[User, str | None]:
    """Creates a user in one role. Returns the user and the generated password, if one was."""
    role = _checked_role(role)
    username = User.normalize_username(username.strip())
    if not username:
        raise InvalidInput("username is required", field="username")
    try:
        User._meta.get_field("username").run_validators(username)
    except ValidationError as exc:
        raise InvalidInput(" ".join(exc.messages), field="username") from None
    if User.objects.filter(username__iexact=username).exists():
        raise UserExists(f"a user named {username!r} already exists (usernames are case-insensitive)")
    generated = None
    if not password:
        generated = password = secrets.token_urlsafe(12)
    user = User(username=username)
    user.set_password(_checked_password(password, user))
    user.save()
    _set_role(user, role)
    _audit(user, actor=actor, action="user.create", after=_state(user))
    return user, generated


def _active_admins():
    return User.objects.filter(is_active=True).filter(Q(is_superuser=True) | Q(groups__name="admin")).distinct()


def end_sessions(*, user: User, keep_session_key: str | None = None, keep_token_hash: str | None = None) -> int:
    """Signs the user out everywhere (but the session or bearer token kept): their bearer tokens
    and their dashboard sessions are deleted, so their next request is refused. Returns how many
    ended."""
    ended, _ = AdminToken.objects.filter(user=user).exclude(token_hash=keep_token_hash or "").delete()
    # Sessions live in the database (the default engine) and name their user only inside the
    # encoded data, so each live one is decoded.
    mine = [
        session.session_key
        for session in Session.objects.filter(expire_date__gt=timezone.now()).exclude(
            session_key=keep_session_key or ""
        )
        if session.get_decoded().get(SESSION_KEY) == str(user.pk)
    ]
    Session.objects.filter(session_key__in=mine).delete()
    return ended + len(mine)


@transaction.atomic
def user_update(*, user: User, role: str | None = None, is_active: bool | None = None, actor=None) -> User:
    """Changes a user's role and whether they may sign in. Removing the last active admin and
    deactivating yourself are refused; a deactivation or a demotion ends the user's sessions."""
    # Every change that may remove an admin takes this lock first, so two of them at once cannot
    # each leave the other's admin as the last one and then remove it.
    Group.objects.select_for_update().filter(name="admin").first()
    user = User.objects.select_for_update().get(pk=user.pk)
    before = _state(user)
    role = before["role"] if role is None else _checked_role(role)
    is_active = user.is_active if is_active is None else is_active
    if not is_active and user.is_active and actor is not None and actor.pk == user.pk:
        raise InvalidInput("you cannot deactivate your own account", field="is_active")
    was_admin = before["role"] == "admin" and user.is_active
    if was_admin and (role != "admin" or not is_active) and not _active_admins().exclude(pk=user.pk).exists():
        raise Conflict("cannot remove the last active admin", code="last_admin")
    if role != before["role"]:
        _set_role(user, role)
    user.is_active = is_active
    user.save()
    demoted = role_rank(role) < role_rank(before["role"])
    if (before["is_active"] and not is_active) or demoted:
        end_sessions(user=user)
    _audit(user, actor=actor, action="user.update", before=before, after=_state(user))
    return user


@transaction.atomic
def user_reset_password(*, user: User, password: str | None, actor=None) -> str | None:
    """Sets a new password (generated when none is given, and returned) and ends every session
    of the user."""
    generated = None
    if not password:
        generated = password = secrets.token_urlsafe(12)
    user.set_password(_checked_password(password, user))
    user.save(update_fields=["password"])
    end_sessions(user=user)
    _audit(user, actor=actor, action="user.reset_password", after={"password": MASKED})
    return generated


@transaction.atomic
def password_change(
    *,
    user: User,
    current_password: str,
    new_password: str,
    keep_session_key: str | None = None,
    keep_token_hash: str | None = None,
) -> None:
    """The user's own change: the current password first; every other session of theirs ends."""
    _checked_password(new_password, user, field="new_password")
    if not user.check_password(current_password):
        raise Forbidden("the current password is wrong", code="wrong_password")
    user.set_password(new_password)
    user.save(update_fields=["password"])
    end_sessions(user=user, keep_session_key=keep_session_key, keep_token_hash=keep_token_hash)
    _audit(user, actor=user, action="user.change_password", after={"password": MASKED})
