"""Admin API for RAG stores (admins write, everyone reads) and their documents as data (editors
delete). Documents enter and re-enter the queue through ingestion's views."""

from __future__ import annotations

from urllib.parse import quote

from django.http import HttpResponse
from rest_framework.response import Response
from rest_framework.views import APIView

from ragmux.core.roles import AdminWrites, EditorWrites, IsViewer
from ragmux.core.serializers import refuse_body
from stores import selectors, services
from stores.backends import backend_statuses, text_search_configs
from stores.models import STORE_SETTINGS, store_defaults
from stores.serializers import (
    BackendStatusOutput,
    DocumentOutput,
    DocumentUpdateInput,
    StoreCreateInput,
    StoreOutput,
    TextSearchConfigOutput,
)


def _serves(view: APIView, request) -> bool:
    # An unserved method must answer 405 whether or not the object exists.
    return hasattr(view, request.method.lower())


class StoreEndpoint(APIView):
    """An endpoint under /rag-stores/{store_id}: the store is resolved once, after the role check."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if _serves(self, request):
            self.store = selectors.store_get(kwargs["store_id"])


class DocumentEndpoint(APIView):
    """An endpoint under /documents/{document_id}: the document is resolved once, after the role check."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if _serves(self, request):
            self.document = selectors.document_get(kwargs["document_id"])


def _store_values(validated: dict) -> dict:
    return {name: value for name, value in validated.items() if name in STORE_SETTINGS}


class StoresApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request):
        return Response(StoreOutput(selectors.store_list(), many=True).data)

    def post(self, request):
        data = StoreCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        store = services.store_create(
            name=data.validated_data["name"], values=_store_values(data.validated_data), actor=request.user
        )
        return Response(StoreOutput(selectors.store_get(store.pk)).data, status=201)


class StoreApi(StoreEndpoint):
    permission_classes = [AdminWrites]

    def get(self, request, store_id: int):
        return Response(StoreOutput(self.store).data)

    def _update(self, request, *, partial: bool):
        data = StoreCreateInput(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        values = _store_values(data.validated_data)
        if not partial:
            values = {**store_defaults(), **values}
        outcome = services.store_update(
            store=self.store, name=data.validated_data.get("name", self.store.name), values=values, actor=request.user
        )
        body = StoreOutput(selectors.store_get(outcome.store.pk)).data
        return Response({**body, "reprocess_recommended": outcome.reprocess_recommended})

    def put(self, request, store_id: int):
        return self._update(request, partial=False)

    def patch(self, request, store_id: int):
        return self._update(request, partial=True)

    def delete(self, request, store_id: int):
        refuse_body(request)
        services.store_delete(store=self.store, actor=request.user)
        return Response({"ok": True})


class DocumentApi(DocumentEndpoint):
    permission_classes = [EditorWrites]

    def get(self, request, document_id: int):
        return Response(DocumentOutput(self.document).data)

    def patch(self, request, document_id: int):
        data = DocumentUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.document_update(document=self.document, values=data.validated_data, actor=request.user)
        return Response(DocumentOutput(selectors.document_get(document_id)).data)

    def delete(self, request, document_id: int):
        refuse_body(request)
        services.document_delete(document=self.document, actor=request.user)
        return Response({"ok": True})


class DocumentDownloadApi(APIView):
    permission_classes = [IsViewer]

    def get(self, request, document_id: int):
        document = selectors.document_original(document_id)
        response = HttpResponse(bytes(document.original), content_type=document.mime or "application/octet-stream")
        response["Content-Disposition"] = f"attachment; filename*=UTF-8''{quote(document.filename, safe='')}"
        return response


class SearchBackendsApi(APIView):
    def get(self, request):
        return Response(BackendStatusOutput(backend_statuses(), many=True).data)


class TextSearchConfigsApi(APIView):
    def get(self, request):
        return Response(TextSearchConfigOutput([{"name": name} for name in text_search_configs()], many=True).data)
