"""Reads of projects, gateway keys and the request log."""

from __future__ import annotations

from django.db.models import QuerySet

from gateway.clients.models import GatewayKey, Project, RequestLog
from ragmux.core.errors import NotFound


def project_list() -> QuerySet[Project]:
    return Project.objects.order_by("name")


def project_get(*, project_id: int) -> Project:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        raise NotFound.of("project")
    return project


def key_list(*, project: Project) -> QuerySet[GatewayKey]:
    return GatewayKey.objects.filter(project=project, revoked_at=None).order_by("id")


def key_get(*, key_id: int) -> GatewayKey:
    api_key = GatewayKey.objects.filter(pk=key_id, revoked_at=None).first()
    if api_key is None:
        raise NotFound.of("key")
    return api_key


def key_by_hash(*, key_hash: str) -> GatewayKey | None:
    """The key with everything a `/v1` call needs, in one query; never cached, so a revoked or
    rotated key fails on its very next request in every process."""
    # Not .first(): key_hash is unique, and its ORDER BY cost a sort and compile time on every call.
    try:
        return GatewayKey.objects.select_related(
            "project__chat_connection", "project__embedding_connection", "project__store__embedding_connection"
        ).get(key_hash=key_hash)
    except GatewayKey.DoesNotExist:
        return None


def request_log_list(*, project: Project | None = None, limit: int = 100) -> QuerySet[RequestLog]:
    logs = RequestLog.objects.order_by("-id")
    if project is not None:
        logs = logs.filter(project=project)
    return logs[:limit]
