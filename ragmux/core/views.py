"""The admin API of the kernel's own services: sign-in (`signin`, `authentication`), users
(`accounts`) and the audit trail (`audit`)."""

from __future__ import annotations

from django.contrib.auth import login, logout
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from ragmux.core import accounts
from ragmux.core.authentication import bearer_login, bearer_token, change_own_password, revoke_admin_token
from ragmux.core.models import AuditEntry
from ragmux.core.paging import offset_page, page_fields
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
from ragmux.core.signin import sign_in


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
        return Response({"entries": AuditEntryOutput(page.object_list, many=True).data, **page_fields(page)})
