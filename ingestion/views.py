"""Admin API for admission: uploads, text ingest, reprocessing (editors write, everyone reads)."""

from __future__ import annotations

from dataclasses import asdict

from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from ingestion import services
from ingestion.serializers import ReprocessInput, TextDocumentInput, UploadFormInput
from ingestion.uploads import oversize_upload
from ragmux.core.paging import offset_page
from ragmux.core.roles import EditorWrites
from ragmux.core.serializers import refuse_body
from stores import selectors
from stores.serializers import DocumentListQuery, DocumentOutput
from stores.views import DocumentEndpoint, StoreEndpoint


def _upload_response(result: services.UploadResult) -> Response:
    lists = {
        "documents": DocumentOutput(result.documents, many=True).data,
        "skipped": [asdict(skipped) for skipped in result.skipped],
    }
    if result.refusal is not None:
        result.refusal.beside.update(lists)
        raise result.refusal
    return Response(lists, status=202)


class StoreDocumentsApi(StoreEndpoint):
    permission_classes = [EditorWrites]
    parser_classes = [MultiPartParser]

    def get(self, request, store_id: int):
        query = DocumentListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        documents = selectors.document_list(store=self.store, status=query.validated_data.get("status"))
        page = offset_page(documents, query.validated_data)
        return Response(
            {
                "documents": DocumentOutput(page.object_list, many=True).data,
                "total": page.paginator.count,
                "page": page.number,
                "page_size": page.paginator.per_page,
            }
        )

    def post(self, request, store_id: int):
        uploads = request.FILES.getlist("file") + request.FILES.getlist("files")
        oversize_upload(request)
        # Only the form's own fields: the files are read above.
        form = UploadFormInput(data={name: request.POST[name] for name in ("attributes",) if name in request.POST})
        form.is_valid(raise_exception=True)
        attributes = form.validated_data["attributes"]
        files = [
            services.IncomingFile(
                filename=services.sanitise_filename(upload.name), data=upload.read(), attributes=attributes
            )
            for upload in uploads
        ]
        return _upload_response(services.document_upload(store=self.store, files=files, actor=request.user))


class StoreTextDocumentApi(StoreEndpoint):
    permission_classes = [EditorWrites]

    def post(self, request, store_id: int):
        data = TextDocumentInput(data=request.data)
        data.is_valid(raise_exception=True)
        return _upload_response(
            services.document_ingest_text(store=self.store, **data.validated_data, actor=request.user)
        )


class StoreReprocessApi(StoreEndpoint):
    permission_classes = [EditorWrites]

    def post(self, request, store_id: int):
        data = ReprocessInput(data=request.data)
        data.is_valid(raise_exception=True)
        queued = services.store_reprocess(
            store=self.store, status=data.validated_data.get("status"), actor=request.user
        )
        return Response({"ok": True, "documents": queued}, status=202)


class DocumentReprocessApi(DocumentEndpoint):
    permission_classes = [EditorWrites]

    def post(self, request, document_id: int):
        refuse_body(request)
        document = services.document_reprocess(document=self.document, actor=request.user)
        return Response({"ok": True, "document": DocumentOutput(document).data}, status=202)
