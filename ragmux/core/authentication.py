"""How /admin/api recognises a caller: a bearer token from the login endpoint, or the
dashboard's session cookie (with Django's CSRF protection)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model, update_session_auth_hash, user_logged_in
from django.contrib.auth.backends import ModelBackend
from django.db.models import Case, Value, When
from django.utils import timezone
from rest_framework import authentication, exceptions

from ragmux.core.accounts import password_change
from ragmux.core.models import AdminToken

TOKEN_BYTES = 36


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_admin_token(*, user) -> str:
    now = timezone.now()
    # Expired tokens never authenticate again; sweeping them whenever one is issued keeps the
    # table about as large as the number of live tokens.
    AdminToken.objects.filter(expires_at__lte=now).delete()
    token = secrets.token_urlsafe(TOKEN_BYTES)
    AdminToken.objects.create(
        user=user,
        token_hash=hash_token(token),
        expires_at=now + timedelta(seconds=settings.SESSION_TTL),
    )
    return token


def bearer_login(*, request, user) -> str:
    """What django.contrib.auth.login does for the cookie, for a bearer token: issues it and
    stamps ``last_login`` through the same signal."""
    token = issue_admin_token(user=user)
    user_logged_in.send(sender=type(user), request=request, user=user)
    return token


def revoke_admin_token(*, token: str) -> None:
    AdminToken.objects.filter(token_hash=hash_token(token)).delete()


def bearer_token(request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def change_own_password(request, *, current_password: str, new_password: str) -> None:
    """The signed-in user's own change: the credential of this request (its session or bearer
    token) stays valid, every other one ends. The API and the dashboard's form both call this."""
    token = bearer_token(request)
    password_change(
        user=request.user,
        current_password=current_password,
        new_password=new_password,
        keep_session_key=None if token else request.session.session_key,
        keep_token_hash=hash_token(token) if token else None,
    )
    if token is None:
        # The session holds a hash of the old password, which would sign it out too.
        update_session_auth_hash(request, request.user)


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


class CaseInsensitiveModelBackend(ModelBackend):
    """Django's password check, with the username matched regardless of case (``Admin`` signs in
    as ``admin``); the stored spelling is what the rest of the app sees."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None or password is None:
            return None
        users = get_user_model()._default_manager
        # Creation refuses case-only duplicates; should older rows hold some, the exact spelling wins.
        user = (
            users.filter(username__iexact=username)
            .order_by(Case(When(username=username, then=Value(0)), default=Value(1)), "pk")
            .first()
        )
        if user is None:
            # Hash anyway, so an unknown name takes as long to refuse as a wrong password.
            get_user_model()().set_password(password)
            return None
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None
