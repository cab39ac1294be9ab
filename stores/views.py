"""Admin API for RAG stores (admins write, everyone reads) and documents (editors write)."""

from __future__ import annotations

from urllib.parse import quote

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from ragmux.errors import ServiceError, error_body
from ragmux.roles import AdminWrites, EditorWrites, IsViewer
from retrieval.backends import backend_statuses
from stores import selectors, services
from stores.models import Document
from stores.serializers import (
    BackendStatusOutput,
    DocumentListQuery,
    DocumentOutput,
    StoreCreateInput,
    StoreOutput,
    TextDocumentInput,
)


def _store_values(validated: dict) -> dict:
    return {name: value for name, value in validated.items() if name != "name"}


class StoresApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request):
        return Response(StoreOutput(selectors.store_list(), many=True).data)

    def post(self, request):
        data = StoreCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        store = services.store_create(name=data.validated_data["name"], values=_store_values(data.validated_data))
        return Response(StoreOutput(selectors.store_get(store.pk)).data, status=201)


class StoreApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request, store_id: int):
        return Response(StoreOutput(selectors.get_store(store_id)).data)

    def _update(self, request, store_id: int, *, partial: bool):
        store = selectors.get_store(store_id)
        data = StoreCreateInput(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        values = _store_values(data.validated_data)
        if not partial:
            values = {**services.STORE_DEFAULTS, **values}
        outcome = services.store_update(store=store, name=data.validated_data.get("name", store.name), values=values)
        body = StoreOutput(selectors.store_get(outcome.store.pk)).data
        return Response({**body, "reprocess_recommended": outcome.reprocess_recommended})

    def put(self, request, store_id: int):
        return self._update(request, store_id, partial=False)

    def patch(self, request, store_id: int):
        return self._update(request, store_id, partial=True)

    def delete(self, request, store_id: int):
        services.store_delete(store=selectors.get_store(store_id))
        return Response({"ok": True})


class StoreReprocessApi(APIView):
    permission_classes = [EditorWrites]

    def post(self, request, store_id: int):
        queued = services.store_reprocess_all(store=selectors.get_store(store_id))
        return Response({"ok": True, "documents": queued}, status=202)


def _upload_response(result: services.UploadResult) -> Response:
    documents = DocumentOutput(result.documents, many=True).data
    if result.error is None:
        return Response({"documents": documents}, status=202)
    error = result.error
    return Response(
        {**error_body(error.status, error.message, error.code, **error.extra), "documents": documents},
        status=error.status,
    )


class StoreDocumentsApi(APIView):
    permission_classes = [EditorWrites]
    parser_classes = [MultiPartParser]

    def get(self, request, store_id: int):
        store = selectors.get_store(store_id)
        query = DocumentListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        page, size = query.validated_data["page"], query.validated_data["page_size"]
        documents = selectors.document_list(store=store, status=query.validated_data.get("status"))
        return Response(
            {
                "documents": DocumentOutput(documents[(page - 1) * size : page * size], many=True).data,
                "total": documents.count(),
                "page": page,
                "page_size": size,
            }
        )

    def post(self, request, store_id: int):
        store = selectors.get_store(store_id)
        uploads = request.FILES.getlist("file") + request.FILES.getlist("files")
        oversize = getattr(request._request, "oversize_upload", None)
        if oversize is not None:
            raise ServiceError(
                f'"{oversize}" is larger than {settings.MAX_UPLOAD_MB} MiB (MAX_UPLOAD_MB); nothing was stored',
                code="upload_too_large",
                status=413,
            )
        files = [
            services.IncomingFile(filename=services.sanitise_filename(upload.name), data=upload.read())
            for upload in uploads
        ]
        return _upload_response(services.document_upload(store=store, files=files))


class StoreTextDocumentApi(APIView):
    permission_classes = [EditorWrites]
    parser_classes = [JSONParser]

    def post(self, request, store_id: int):
        store = selectors.get_store(store_id)
        data = TextDocumentInput(data=request.data)
        data.is_valid(raise_exception=True)
        return _upload_response(services.document_ingest_text(store=store, **data.validated_data))


class DocumentApi(APIView):
    permission_classes = [EditorWrites]

    def get(self, request, document_id: int):
        return Response(DocumentOutput(selectors.get_document(document_id)).data)

    def delete(self, request, document_id: int):
        services.document_delete(document=selectors.get_document(document_id))
        return Response({"ok": True})


class DocumentDownloadApi(APIView):
    permission_classes = [IsViewer]

    def get(self, request, document_id: int):
        document = get_object_or_404(Document, pk=document_id)
        response = HttpResponse(bytes(document.original), content_type=document.mime or "application/octet-stream")
        response["Content-Disposition"] = f"attachment; filename*=UTF-8''{quote(document.filename, safe='')}"
        return response


class DocumentReprocessApi(APIView):
    permission_classes = [EditorWrites]

    def post(self, request, document_id: int):
        document = services.document_reprocess(document=selectors.get_document(document_id))
        return Response({"ok": True, "document": DocumentOutput(document).data}, status=202)


class SearchBackendsApi(APIView):
    def get(self, request):
        return Response(BackendStatusOutput(backend_statuses(), many=True).data)
