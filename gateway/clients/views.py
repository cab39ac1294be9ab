"""Admin API for projects, their gateway keys and the request log: reads for every role,
writes for admins."""

from __future__ import annotations

from django.utils import timezone
from rest_framework.response import Response
from rest_framework.views import APIView

from gateway.clients import selectors, services, usage_reports
from gateway.clients.exports import csv_pieces, with_dollars
from gateway.clients.serializers import (
    REQUEST_LOG_COLUMNS,
    REQUEST_LOG_CSV_COST,
    REQUEST_LOG_CSV_NAMES,
    IssuedKeyOutput,
    KeyInput,
    KeyOutput,
    KeySearchQuery,
    ListedKeyOutput,
    ProjectInput,
    ProjectOutput,
    RequestLogOutput,
    RequestLogPageQuery,
    RequestLogQuery,
    UsageSummaryQuery,
    encode_cursor,
    usage_report_output,
    usage_summary_output,
)
from ragmux.core.paging import offset_page, page_fields, without_page
from ragmux.core.roles import AdminWrites, IsViewer
from ragmux.core.serializers import refuse_body
from ragmux.core.streaming import AnyAccept, streaming_response

REQUEST_LOG_PAGE = 100
CSV_BATCH = 1000


class ProjectsApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request):
        # Each project's allowed routes in one more query, not one per project.
        projects = selectors.project_list().prefetch_related("allowed_routes")
        return Response(ProjectOutput(projects, many=True).data)

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
        """Every field; the limits left out keep their values."""
        return self._update(request, project_id, partial=False)

    def patch(self, request, project_id: int):
        return self._update(request, project_id, partial=True)

    def _update(self, request, project_id: int, *, partial: bool):
        project = selectors.project_get(project_id=project_id)
        data = ProjectInput(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        return Response(
            ProjectOutput(services.project_update(project=project, **data.validated_data, actor=request.user)).data
        )

    def delete(self, request, project_id: int):
        refuse_body(request)
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


class KeysApi(APIView):
    """Every key across projects, revoked ones too, filtered and a page at a time. Keys are
    created under their project, so this path has no writes: any role asking for one is told 405."""

    permission_classes = [IsViewer]

    def get(self, request):
        query = KeySearchQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = offset_page(selectors.key_search(**without_page(query.validated_data)), query.validated_data)
        return Response({"keys": ListedKeyOutput(page.object_list, many=True).data, **page_fields(page)})


class KeyRotateApi(APIView):
    permission_classes = [AdminWrites]

    def post(self, request, key_id: int):
        refuse_body(request)
        issued = services.key_rotate(api_key=selectors.key_get(key_id=key_id), actor=request.user)
        return Response(IssuedKeyOutput(issued).data)


class KeyApi(APIView):
    permission_classes = [AdminWrites]

    def patch(self, request, key_id: int):
        """The key's name, scopes, expiry and limits: those given change."""
        api_key = selectors.key_get(key_id=key_id)
        data = KeyInput(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        return Response(KeyOutput(services.key_update(api_key=api_key, **data.validated_data, actor=request.user)).data)

    def delete(self, request, key_id: int):
        refuse_body(request)
        services.key_revoke(api_key=selectors.key_get(key_id=key_id), actor=request.user)
        return Response({"ok": True})


class ProjectRequestLogsApi(APIView):
    def get(self, request, project_id: int):
        project = selectors.project_get(project_id=project_id)
        logs = selectors.request_log_list(project_id=project.pk)[:REQUEST_LOG_PAGE]
        return Response(RequestLogOutput(logs, many=True).data)


class RequestLogsApi(APIView):
    """The request log, filtered, newest first, a page at a time (`next` is the cursor)."""

    def get(self, request):
        query = RequestLogPageQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = dict(query.validated_data)
        before_id, limit = filters.pop("cursor", None), filters.pop("limit")
        rows, next_before = selectors.request_log_page(
            selectors.request_log_list(**filters), before_id=before_id, limit=limit
        )
        return Response(
            {
                "data": RequestLogOutput(rows, many=True).data,
                "next": encode_cursor(next_before) if next_before is not None else None,
            }
        )


class RequestLogsCsvApi(APIView):
    """Every row the same filters select in the JSON API, as CSV, streamed."""

    content_negotiation_class = AnyAccept

    def get(self, request):
        query = RequestLogQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        read = (*REQUEST_LOG_COLUMNS, *REQUEST_LOG_CSV_NAMES.values())
        batches = selectors.request_log_batches(
            selectors.request_log_list(**query.validated_data), read, size=CSV_BATCH
        )
        rows = with_dollars(batches, micros_at=REQUEST_LOG_COLUMNS.index("cost_micros"))
        header = (*REQUEST_LOG_COLUMNS, *REQUEST_LOG_CSV_NAMES, REQUEST_LOG_CSV_COST)
        response = streaming_response(request, csv_pieces(header, rows), content_type="text/csv")
        filename = f"ragmux-request-logs-{timezone.now():%Y-%m-%d}.csv"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response


class ProjectUsageApi(APIView):
    """The project's spend in the current UTC minute, day and month against its limits."""

    def get(self, request, project_id: int):
        project = selectors.project_get(project_id=project_id)
        return Response(usage_report_output(usage_reports.usage_report(project=project, now=timezone.now())))


class KeyUsageApi(APIView):
    """The key's spend against the key's own limits (its project's are the project's report)."""

    def get(self, request, key_id: int):
        api_key = selectors.key_get(key_id=key_id)
        report = usage_reports.usage_report(project=api_key.project, api_key=api_key, now=timezone.now())
        return Response(usage_report_output(report))


class UsageSummaryApi(APIView):
    """The request log summed over a window, all time, per day and (asked for) per project."""

    def get(self, request):
        query = UsageSummaryQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        summary = usage_reports.usage_summary(**query.validated_data, now=timezone.now())
        return Response(usage_summary_output(summary))
