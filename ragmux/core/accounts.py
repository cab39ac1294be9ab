"""Services for dashboard users."""

from __future__ import annotations

import secrets

from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction

from ragmux.core.errors import InvalidInput
from ragmux.core.roles import ROLES


class UserExists(Exception):
    pass


@transaction.atomic
def user_create(*, username: str, password: str | None, role: str) -> tuple[User, str | None]:
    """Creates a user in one role. Returns the user and the generated password, if one was."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    if User.objects.filter(username__iexact=username).exists():
        raise UserExists(f"a user named {username!r} already exists")
    generated = None
    if not password:
        generated = password = secrets.token_urlsafe(12)
    user = User(username=User.normalize_username(username))
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise InvalidInput(" ".join(exc.messages), field="password") from None
    user.set_password(password)
    user.save()
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user, generated
