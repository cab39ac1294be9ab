"""The three roles (viewer < editor < admin) and the DRF permissions that enforce them.

Roles are Django groups of the same name; a superuser is an admin. A signed-in user in none
of the groups (an "outsider") may use nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from rest_framework.permissions import SAFE_METHODS, BasePermission

ROLES = ("viewer", "editor", "admin")
_RANK = {role: rank for rank, role in enumerate(ROLES, start=1)}


def ensure_role_groups(**_: Any) -> None:
    for role in ROLES:
        Group.objects.get_or_create(name=role)


def user_role(user: Any) -> str | None:
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    cached = getattr(user, "_ragmux_role", False)
    if cached is not False:
        return cached
    if user.is_superuser:
        role = "admin"
    else:
        names = set(user.groups.values_list("name", flat=True))
        role = next((r for r in reversed(ROLES) if r in names), None)
    user._ragmux_role = role
    return role


def role_rank(role: str | None) -> int:
    """0 for no role, then 1, 2, 3 from viewer to admin."""
    return _RANK.get(role, 0)


def has_role(user: Any, needed: str) -> bool:
    return role_rank(user_role(user)) >= _RANK[needed]


def role_context(request: Any) -> dict:
    """Template context: what the signed-in user may do, so pages show only that."""
    user = getattr(request, "user", None)
    return {
        "ragmux_role": user_role(user),
        "can_edit": has_role(user, "editor"),
        "can_admin": has_role(user, "admin"),
    }


class _RolePermission(BasePermission):
    read_role = "viewer"
    write_role = "viewer"

    def has_permission(self, request, view) -> bool:
        needed = self.read_role if request.method in SAFE_METHODS else self.write_role
        if has_role(request.user, needed):
            return True
        self.message = f"insufficient role: this needs the {needed} role"
        return False


class IsViewer(_RolePermission):
    """Any role may read and run searches."""


class EditorWrites(_RolePermission):
    write_role = "editor"


class AdminWrites(_RolePermission):
    write_role = "admin"


class AdminOnly(_RolePermission):
    """Users and the audit trail: admins alone read them too."""

    read_role = "admin"
    write_role = "admin"
