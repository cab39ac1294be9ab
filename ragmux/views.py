from __future__ import annotations

from django.contrib.auth import authenticate, login, logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from ragmux.core.authentication import bearer_token, issue_admin_token, revoke_admin_token
from ragmux.core.errors import Unauthenticated, error_response
from ragmux.core.middleware import API_PREFIXES
from ragmux.core.roles import user_role


def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


@require_GET
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
    if request.path.startswith(API_PREFIXES):
        return error_response(404, "not found", "not_found")
    return render(request, "404.html", status=404)


def server_error(request):
    if request.path.startswith(API_PREFIXES):
        request_id = getattr(request, "request_id", "-")
        return error_response(500, f"internal error (request id {request_id})", "internal_error")
    return HttpResponse("internal error", status=500, content_type="text/plain")


class UserOutput(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    role = serializers.SerializerMethodField()
    is_active = serializers.BooleanField()
    last_login_at = serializers.DateTimeField(source="last_login")
    created_at = serializers.DateTimeField(source="date_joined")

    def get_role(self, user) -> str | None:
        return user_role(user)


class LoginApi(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    class Input(serializers.Serializer):
        username = serializers.CharField(max_length=150, trim_whitespace=True)
        password = serializers.CharField(max_length=1024, trim_whitespace=False)
        bearer = serializers.BooleanField(default=False)

    def post(self, request):
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(
            request._request, username=data.validated_data["username"], password=data.validated_data["password"]
        )
        if user is None:
            raise Unauthenticated("invalid username or password", code="invalid_credentials")
        body = {"user": UserOutput(user).data}
        if data.validated_data["bearer"]:
            body["token"] = issue_admin_token(user=user)
        else:
            login(request._request, user)
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


class DashboardLoginView(auth_views.LoginView):
    template_name = "dashboard/login.html"
    redirect_authenticated_user = True


class DashboardLogoutView(auth_views.LogoutView):
    next_page = "/admin/login/"


@login_required
def dashboard_home(request):
    return render(request, "dashboard/home.html")
