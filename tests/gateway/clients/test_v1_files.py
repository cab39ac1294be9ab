"""`/v1/files` through the official `openai` package: upload, list, read back and delete a file, a
key seeing only its project's files, each call on one request log row; hostile input is a 4xx in
OpenAI's envelope, never a 500."""

from __future__ import annotations

import io

import openai
import pytest

from tests.gateway.clients.test_v1_responses import sdk_for
from tests.helpers import wait_for_logs

NOTES = b"# Release notes\n\nThe comet release ships on Friday."


@pytest.fixture
def sdk(asgi_url, v1, project_key):
    client = sdk_for(asgi_url, project_key)
    yield client
    client.close()


def upload(sdk, name: str = "notes.md", data: bytes = NOTES, purpose: str = "assistants"):
    return sdk.files.create(file=(name, io.BytesIO(data)), purpose=purpose)


def test_a_file_is_uploaded_listed_read_back_and_deleted(sdk, project):
    created = upload(sdk)
    assert created.id.startswith("file-") and created.object == "file"
    assert (created.filename, created.bytes, created.purpose, created.status) == (
        "notes.md",
        len(NOTES),
        "assistants",
        "processed",
    )
    assert sdk.files.retrieve(created.id).model_dump() == created.model_dump()
    assert sdk.files.content(created.id).content == NOTES

    other = upload(sdk, "data.txt", b"user data", purpose="user_data")
    assert [f.id for f in sdk.files.list()] == [other.id, created.id]  # newest first
    assert [f.id for f in sdk.files.list(purpose="assistants")] == [created.id]
    assert [f.id for f in sdk.files.list(order="asc")] == [created.id, other.id]
    first_page = sdk.files.list(limit=1)
    assert [f.id for f in first_page.data] == [other.id] and first_page.has_more
    assert [f.id for f in sdk.files.list(limit=1, after=other.id).data] == [created.id]
    assert [f.id for f in sdk.files.list(limit=1)] == [other.id, created.id]  # the SDK pages on

    gone = sdk.files.delete(created.id)
    assert (gone.id, gone.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError):
        sdk.files.retrieve(created.id)
    rows = wait_for_logs(13, project=project)
    assert {row.endpoint for row in rows} == {"files"} and len(rows) == 13
    assert [row.status_code for row in rows][-1] == 404


def test_a_key_of_another_project_never_sees_the_files(asgi_url, v1, sdk, other_project, key_of):
    created = upload(sdk)
    outsider = sdk_for(asgi_url, key_of(other_project))
    assert list(outsider.files.list()) == []
    for reach in (outsider.files.retrieve, outsider.files.content, outsider.files.delete):
        with pytest.raises(openai.NotFoundError):
            reach(created.id)
    assert sdk.files.retrieve(created.id).id == created.id


def test_reading_and_writing_files_need_their_scopes(asgi_url, v1, sdk, project, key_of):
    created = upload(sdk)
    reader = sdk_for(asgi_url, key_of(project, ["files_read"]))
    writer = sdk_for(asgi_url, key_of(project, ["files_write"]))
    chat_only = sdk_for(asgi_url, key_of(project, ["chat"]))

    assert reader.files.retrieve(created.id).id == created.id
    with pytest.raises(openai.PermissionDeniedError) as refused:
        upload(reader)
    assert refused.value.code == "insufficient_scope"
    with pytest.raises(openai.PermissionDeniedError):
        reader.files.delete(created.id)
    assert upload(writer).filename == "notes.md"
    for read in (lambda: writer.files.list(), lambda: chat_only.files.content(created.id)):
        with pytest.raises(openai.PermissionDeniedError):
            read()
    assert v1().get("/files").status_code == 401


@pytest.mark.parametrize(
    ("files", "form", "status", "code"),
    [
        ({"file": ("notes.md", NOTES)}, {"purpose": "fine-tune"}, 400, "invalid_request"),
        ({"file": ("notes.md", NOTES)}, {"purpose": "assist\x00ants"}, 400, "invalid_request"),
        ({"file": ("notes.md", NOTES)}, {}, 400, "invalid_request"),
        ({"other": ("notes.md", NOTES)}, {"purpose": "assistants"}, 400, "validation_error"),
        ([("file", ("a.md", NOTES)), ("file", ("b.md", NOTES))], {"purpose": "assistants"}, 400, "validation_error"),
        ({"file": ("empty.md", b"")}, {"purpose": "assistants"}, 400, "empty_file"),
        ({"file": ("tool.exe", b"MZ\x90\x00" * 100)}, {"purpose": "assistants"}, 400, "unsupported_format"),
        ({"file": ("nul\x00name.md", NOTES)}, {"purpose": "assistants"}, 200, None),
    ],
    ids=["purpose", "nul purpose", "no purpose", "no file", "two files", "empty", "unsupported", "nul filename"],
)
def test_an_upload_is_checked_as_ingestion_checks_one(v1, project_key, files, form, status, code):
    answer = v1(project_key).post("/files", files=files, data=form)
    assert answer.status_code == status, answer.text
    if code is not None:
        assert answer.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        (b'{"purpose": "assistants"}', {"Content-Type": "application/json"}, "unsupported_media_type"),
        (b"--x\r\nnot a part", {"Content-Type": "multipart/form-data; boundary=x"}, None),
        (b"garbage", {"Content-Type": "multipart/form-data"}, "invalid_multipart"),
    ],
    ids=["json", "truncated multipart", "no boundary"],
)
def test_a_body_that_is_no_upload_is_refused(v1, project_key, body, headers, code):
    answer = v1(project_key).post("/files", content=body, headers=headers)
    assert answer.status_code == 400, answer.text
    if code is not None:
        assert answer.json()["error"]["code"] == code


def test_an_oversized_upload_is_refused_with_413_in_the_envelope(v1, project_key, project, settings):
    settings.MAX_UPLOAD_MB = 1
    client = v1(project_key)
    # Past the body's cap (the file and its form): refused while it streams in.
    answer = client.post("/files", files={"file": ("big.txt", b"a" * (2 << 20))}, data={"purpose": "assistants"})
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"
    # Within the body's cap, over the file's: the upload handler cuts the file off.
    answer = client.post(
        "/files", files={"file": ("big.txt", b"a" * ((1 << 20) + 1000))}, data={"purpose": "assistants"}
    )
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "upload_too_large"
    assert "MAX_UPLOAD_MB" in answer.json()["error"]["message"]
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code) == ("files", 413)


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=10001", "limit=abc", "limit=99999999999999999999", "order=up", "purpose=x", "after=nope"],
)
def test_a_bad_list_query_is_a_400(v1, project_key, query):
    answer = v1(project_key).get(f"/files?{query}")
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("file_id", ["file-unknown", "file-" + "0" * 24, "file-%00", "x" * 3000])
def test_an_unknown_file_is_a_404(v1, project_key, file_id):
    client = v1(project_key)
    for answer in (client.get(f"/files/{file_id}"), client.get(f"/files/{file_id}/content")):
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert client.delete(f"/files/{file_id}").status_code == 404
    assert client.put("/files").status_code == 405
