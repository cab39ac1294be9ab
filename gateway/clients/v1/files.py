"""`/v1/files`: OpenAI's Files API for the files a vector store reads. An upload is checked as
ingestion checks one (formats, MAX_UPLOAD_MB, text it could index) and kept as given; a key sees
only its project's files."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.http import content_disposition_header

from gateway.clients import vector_store_selectors as selectors
from gateway.clients import vector_store_services as services
from gateway.clients.ledger import Call
from gateway.clients.models import ClientFile, Endpoint, Scope
from gateway.clients.v1.endpoint import checked, v1_endpoint, validated
from gateway.clients.vector_store_inputs import FileListQuery, FileUploadInput
from gateway.clients.vector_store_shapes import deleted, file_object, list_page
from ingestion.uploads import oversize_upload
from ragmux.core.errors import InvalidInput
from ragmux.core.offloop import off_loop

READ_WRITE = {"GET": Scope.FILES_READ, "POST": Scope.FILES_WRITE, "DELETE": Scope.FILES_WRITE}


def file_shape(client_file: ClientFile) -> dict[str, Any]:
    return file_object(
        file_id=client_file.pk,
        size_bytes=client_file.size_bytes,
        created_at=client_file.created_at,
        filename=client_file.filename,
        purpose=client_file.purpose,
    )


def _upload(request: HttpRequest) -> tuple[str, str, bytes]:
    """The form's purpose and its one file (name and bytes), read in a worker thread: Django's
    multipart parser reads the spooled body synchronously."""
    if (request.content_type or "") != "multipart/form-data":
        raise InvalidInput(
            "the request body must be multipart/form-data with a file and its purpose", code="unsupported_media_type"
        )
    try:
        uploads = request.FILES.getlist("file")
        form = dict(request.POST.items())
    except MultiPartParserError as exc:
        raise InvalidInput(f"malformed multipart body: {exc}", code="invalid_multipart") from None
    oversize_upload(request)
    data = validated(FileUploadInput, {name: form[name] for name in ("purpose",) if name in form})
    if len(uploads) != 1:
        raise InvalidInput("send exactly one file, in the field 'file'", field="file")
    [upload] = uploads
    return data["purpose"], upload.name or "", upload.read()


@v1_endpoint(endpoint=Endpoint.FILES, scope=READ_WRITE, methods=("GET", "POST"), whole_store=True)
async def files(request: HttpRequest, call: Call) -> HttpResponse:
    if request.method == "POST":
        purpose, filename, data = await off_loop(_upload, request)
        client_file = await off_loop(
            services.file_create, project=call.project, filename=filename, purpose=purpose, data=data
        )
        return JsonResponse(file_shape(client_file))
    query = checked(FileListQuery, request.GET)
    listed, has_more = await off_loop(
        selectors.file_list, project=call.project, purpose=query.validated_data.get("purpose"), page=query.page()
    )
    return JsonResponse(list_page([file_shape(client_file) for client_file in listed], has_more=has_more))


@v1_endpoint(endpoint=Endpoint.FILES, scope=READ_WRITE, methods=("GET", "DELETE"), whole_store=True)
async def file(request: HttpRequest, call: Call, file_id: str) -> HttpResponse:
    client_file = await off_loop(selectors.file_get, project=call.project, file_id=file_id)
    if request.method == "DELETE":
        await off_loop(services.file_delete, client_file=client_file)
        return JsonResponse(deleted(client_file.pk, "file"))
    return JsonResponse(file_shape(client_file))


@v1_endpoint(endpoint=Endpoint.FILES, scope=Scope.FILES_READ, methods=("GET",), whole_store=True)
async def file_content(request: HttpRequest, call: Call, file_id: str) -> HttpResponse:
    client_file = await off_loop(selectors.file_get, project=call.project, file_id=file_id, with_content=True)
    response = HttpResponse(bytes(client_file.content), content_type="application/octet-stream")
    response["Content-Disposition"] = content_disposition_header(True, client_file.filename)
    return response
