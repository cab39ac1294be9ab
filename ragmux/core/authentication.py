"""How /admin/api recognises a caller: a bearer token from the login endpoint, or the
dashboard's session cookie (with Django's CSRF protection)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions

from ragmux.core.models import AdminToken

TOKEN_BYTES = 36


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_admin_token(*, user) -> str:
    token = secrets.token_urlsafe(TOKEN_BYTES)
    AdminToken.objects.create(
        user=user,
        token_hash=hash_token(token),
        expires_at=timezone.now() + timedelta(seconds=settings.SESSION_TTL),
    )
    return token


def revoke_admin_token(*, token: str) -> None:
    AdminToken.objects.filter(token_hash=hash_token(token)).delete()


def bearer_token(request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


class BearerTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        token = bearer_token(request)
        if token is None:
            return None
        row = (
            AdminToken.objects.select_related("user")
            .filter(token_hash=hash_token(token), expires_at__gt=timezone.now())
            .first()
        )
        if row is None or not row.user.is_active:
            raise exceptions.AuthenticationFailed("invalid or expired token")
        return row.user, row

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="ragmux"'


class CookieSessionAuthentication(authentication.SessionAuthentication):
    """The dashboard's cookie; a request that also carries a bearer header is judged by that."""

    def authenticate(self, request):
        if bearer_token(request) is not None:
            return None
        return super().authenticate(request)
