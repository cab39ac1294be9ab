from __future__ import annotations

import math
from functools import wraps

from django.contrib.auth import login, logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from ragmux.core import accounts
from ragmux.core.authentication import bearer_login, bearer_token, change_own_password, revoke_admin_token
from ragmux.core.errors import MethodNotAllowed, NotFound, ServerFault, error_response
from ragmux.core.middleware import is_api_path
from ragmux.core.models import AuditEntry
from ragmux.core.paging import offset_page
from ragmux.core.roles import AdminOnly
from ragmux.core.serializers import (
    AuditQuery,
    PasswordChangeInput,
    PasswordResetInput,
    StrictInput,
    UserCreateInput,
    UserUpdateInput,
    audit_entries,
)
from ragmux.core.signin import InvalidCredentials, SignInThrottled, sign_in


def probe(view):
    """Probes only read: GET and HEAD. Anything else gets a JSON 405 rather than Django's CSRF
    page, which a probe has no cookie to pass anyway."""

    @csrf_exempt
    @wraps(view)
    def wrapper(request):
        if request.method not in ("GET", "HEAD"):
            response = error_response(MethodNotAllowed("method not allowed: probes take GET or HEAD"))
            response["Allow"] = "GET, HEAD"
            return response
        return view(request)

    return wrapper


@probe
def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


@probe
def readyz(request):
    from ragmux.celery import app as celery_app

    problems = []
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        problems.append(f"database: {exc.__class__.__name__}")
    try:
        with celery_app.connection_for_write() as broker:
            broker.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"broker: {exc.__class__.__name__}")
    if problems:
        return JsonResponse({"ready": False, "problems": problems}, status=503)
    return JsonResponse({"ready": True})


def not_found(request, exception=None):
    if is_api_path(request.path):
        return error_response(NotFound("not found"))
    return render(request, "404.html", status=404)


def server_error(request):
    if is_api_path(request.path):
        request_id = getattr(request, "request_id", "-")
        return error_response(ServerFault(f"internal error (request id {request_id})"))
    return HttpResponse("internal error", status=500, content_type="text/plain")


class UserOutput(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    role = serializers.SerializerMethodField()
    is_active = serializers.BooleanField()
    last_login_at = serializers.DateTimeField(source="last_login")
    created_at = serializers.DateTimeField(source="date_joined")

    def get_role(self, user) -> str | None:
        return accounts.stored_role(user)


class LoginApi(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    class Input(StrictInput):
        username = serializers.CharField(max_length=150, trim_whitespace=True)
        password = serializers.CharField(max_length=1024, trim_whitespace=False)
        bearer = serializers.BooleanField(default=False)

    def post(self, request):
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        user = sign_in(
            request=request._request, username=data.validated_data["username"], password=data.validated_data["password"]
        )
        body = {}
        if data.validated_data["bearer"]:
            body["token"] = bearer_login(request=request._request, user=user)
        else:
            login(request._request, user)
        # Serialised after signing in, so `last_login_at` is this sign-in.
        body["user"] = UserOutput(user).data
        return Response(body)


class LogoutApi(APIView):
    def post(self, request):
        token = bearer_token(request)
        if token is not None:
            revoke_admin_token(token=token)
        else:
            logout(request._request)
        return Response({"ok": True})


class MeApi(APIView):
    def get(self, request):
        return Response(UserOutput(request.user).data)


class MePasswordApi(APIView):
    def post(self, request):
        data = PasswordChangeInput(data=request.data)
        data.is_valid(raise_exception=True)
        change_own_password(request._request, **data.validated_data)
        return Response({"ok": True})


def _with_generated(body: dict, generated: str | None) -> dict:
    return {**body, "password": generated} if generated else body


class UsersApi(APIView):
    permission_classes = [AdminOnly]

    def get(self, request):
        return Response(UserOutput(accounts.user_list(), many=True).data)

    def post(self, request):
        data = UserCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        user, generated = accounts.user_create(**data.validated_data, actor=request.user)
        return Response(_with_generated(UserOutput(user).data, generated), status=201)


class UserApi(APIView):
    permission_classes = [AdminOnly]

    def get(self, request, user_id: int):
        return Response(UserOutput(accounts.user_get(user_id)).data)

    def patch(self, request, user_id: int):
        user = accounts.user_get(user_id)
        data = UserUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = accounts.user_update(user=user, **data.validated_data, actor=request.user)
        return Response(UserOutput(user).data)

    def delete(self, request, user_id: int):
        """Deactivates: the user's rows in the audit trail keep pointing at them."""
        user = accounts.user_update(user=accounts.user_get(user_id), is_active=False, actor=request.user)
        return Response(UserOutput(user).data)


class UserPasswordApi(APIView):
    permission_classes = [AdminOnly]

    def post(self, request, user_id: int):
        user = accounts.user_get(user_id)
        data = PasswordResetInput(data=request.data)
        data.is_valid(raise_exception=True)
        generated = accounts.user_reset_password(user=user, **data.validated_data, actor=request.user)
        return Response(_with_generated({"ok": True}, generated))


class AuditEntryOutput(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "actor_id",
            "actor_username",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
            "created_at",
        ]


class AuditApi(APIView):
    permission_classes = [AdminOnly]

    def get(self, request):
        query = AuditQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = offset_page(audit_entries(query.validated_data), query.validated_data)
        return Response(
            {
                "entries": AuditEntryOutput(page.object_list, many=True).data,
                "total": page.paginator.count,
                "page": page.number,
                "pages": page.paginator.num_pages,
            }
        )


class SignInForm(AuthenticationForm):
    """Django's sign-in form, checking the password through the throttled `sign_in`."""

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username and password:
            try:
                self.user_cache = sign_in(request=self.request, username=username, password=password)
            except InvalidCredentials:
                raise self.get_invalid_login_error() from None
        return self.cleaned_data


class DashboardLoginView(auth_views.LoginView):
    template_name = "dashboard/login.html"
    authentication_form = SignInForm
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        form = self.get_form()
        try:
            valid = form.is_valid()
        except SignInThrottled as throttled:
            context = self.get_context_data(
                form=form, throttled=throttled, retry_minutes=math.ceil(throttled.retry_after / 60)
            )
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(throttled.retry_after)
            return response
        return self.form_valid(form) if valid else self.form_invalid(form)


class DashboardLogoutView(auth_views.LogoutView):
    next_page = "/admin/login/"
