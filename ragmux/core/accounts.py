"""Services for dashboard users."""

from __future__ import annotations

import secrets

from django.contrib.auth.models import Group, User
from django.db import transaction

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
    user = User.objects.create_user(username=username, password=password)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user, generated
