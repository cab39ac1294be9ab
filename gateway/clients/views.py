"""Admin API for projects, their gateway keys and the request log: reads for every role,
writes for admins."""

from __future__ import annotations

from rest_framework.response import Response
from rest_framework.views import APIView

from gateway.clients import selectors, services
from gateway.clients.serializers import (
    IssuedKeyOutput,
    KeyInput,
    KeyOutput,
    ProjectInput,
    ProjectOutput,
    RequestLogOutput,
)
from ragmux.core.roles import AdminWrites

REQUEST_LOG_PAGE = 100


class ProjectsApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request):
        return Response(ProjectOutput(selectors.project_list(), many=True).data)

    def post(self, request):
        data = ProjectInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(
            ProjectOutput(services.project_create(**data.validated_data, actor=request.user)).data, status=201
        )


class ProjectApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request, project_id: int):
        return Response(ProjectOutput(selectors.project_get(project_id=project_id)).data)

    def put(self, request, project_id: int):
        project = selectors.project_get(project_id=project_id)
        data = ProjectInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(
            ProjectOutput(services.project_update(project=project, **data.validated_data, actor=request.user)).data
        )

    def delete(self, request, project_id: int):
        services.project_delete(project=selectors.project_get(project_id=project_id), actor=request.user)
        return Response({"ok": True})


class ProjectKeysApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request, project_id: int):
        project = selectors.project_get(project_id=project_id)
        return Response(KeyOutput(selectors.key_list(project=project), many=True).data)

    def post(self, request, project_id: int):
        project = selectors.project_get(project_id=project_id)
        data = KeyInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(
            IssuedKeyOutput(services.key_create(project=project, **data.validated_data, actor=request.user)).data,
            status=201,
        )


class KeyRotateApi(APIView):
    permission_classes = [AdminWrites]

    def post(self, request, key_id: int):
        issued = services.key_rotate(api_key=selectors.key_get(key_id=key_id), actor=request.user)
        return Response(IssuedKeyOutput(issued).data)


class KeyApi(APIView):
    permission_classes = [AdminWrites]

    def delete(self, request, key_id: int):
        services.key_revoke(api_key=selectors.key_get(key_id=key_id), actor=request.user)
        return Response({"ok": True})


class ProjectRequestLogsApi(APIView):
    def get(self, request, project_id: int):
        project = selectors.project_get(project_id=project_id)
        logs = selectors.request_log_list(project=project, limit=REQUEST_LOG_PAGE)
        return Response(RequestLogOutput(logs, many=True).data)
