"""The admin API of the kernel's own services: sign-in (`signin`, `authentication`), users
(`accounts`), the audit trail (`audit`) and what the sign-in limiter sees (`signin`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from django.contrib.auth import login
from django.utils import timezone
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from ragmux.core import accounts
from ragmux.core.audit import audit_batches, audit_exported
from ragmux.core.authentication import bearer_login, change_own_password
from ragmux.core.models import AuditEntry
from ragmux.core.paging import offset_page, page_fields
from ragmux.core.roles import AdminOnly
from ragmux.core.serializers import (
    AuditFilters,
    AuditQuery,
    PasswordChangeInput,
    PasswordResetInput,
    StrictInput,
    UserCreateInput,
    UserUpdateInput,
    audit_entries,
    refuse_body,
)
from ragmux.core.signin import sign_in, sign_in_report, sign_out
from ragmux.core.streaming import AnyAccept, streaming_response

EXPORT_BATCH = 1000


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
        refuse_body(request)
        sign_out(request=request._request)
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
        refuse_body(request)
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
            "client_address",
            "created_at",
        ]


class AuditApi(APIView):
    permission_classes = [AdminOnly]

    def get(self, request):
        query = AuditQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = offset_page(audit_entries(query.validated_data), query.validated_data)
        return Response({"entries": AuditEntryOutput(page.object_list, many=True).data, **page_fields(page)})


def ndjson_pieces(batches: Iterable[list[AuditEntry]]) -> Iterator[bytes]:
    """One JSON object per line, as the JSON API writes each entry; one piece per batch."""
    for batch in batches:
        lines = (
            json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
            for entry in AuditEntryOutput(batch, many=True).data
        )
        yield "".join(line + "\n" for line in lines).encode()


class AuditNdjsonApi(APIView):
    """Every entry the same filters select in the JSON API, newest first, as NDJSON, streamed.
    The export is itself audited, with its filters."""

    permission_classes = [AdminOnly]
    content_negotiation_class = AnyAccept

    def get(self, request):
        query = AuditFilters(data=request.query_params)
        query.is_valid(raise_exception=True)
        audit_exported(actor=request.user, filters=query.validated_data)
        batches = audit_batches(audit_entries(query.validated_data), size=EXPORT_BATCH)
        response = streaming_response(request, ndjson_pieces(batches), content_type="application/x-ndjson")
        filename = f"ragmux-audit-{timezone.now():%Y-%m-%dT%H%M%SZ}.ndjson"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response


class LockoutOutput(serializers.Serializer):
    username = serializers.CharField()
    client_address = serializers.CharField(source="address")
    until = serializers.DateTimeField()


class SignInRefusalOutput(serializers.Serializer):
    action = serializers.CharField()
    username = serializers.CharField(source="object_repr")
    client_address = serializers.CharField()
    created_at = serializers.DateTimeField()


class SignInReportOutput(serializers.Serializer):
    failed_last_hour = serializers.IntegerField()
    failed_last_24h = serializers.IntegerField()
    recent_refusals = SignInRefusalOutput(many=True)
    active_lockouts = LockoutOutput(many=True)


class SecurityLoginsApi(APIView):
    """Recent refused sign-ins and the lockouts in force."""

    permission_classes = [AdminOnly]

    def get(self, request):
        return Response(SignInReportOutput(sign_in_report()).data)
