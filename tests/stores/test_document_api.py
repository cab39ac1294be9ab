import io
import threading
import zipfile

import pytest

from ingestion.queue import BACKLOG_FULL
from stores.models import Chunk, ChunkTerm, Document, StoreTerm, StoreTextStats


def make_store(api, connection, **overrides):
    response = api("admin").post(
        "/admin/api/rag-stores", json={"name": "kb", "embedding_connection_id": connection.id, **overrides}
    )
    assert response.status_code == 201, response.text
    return response.json()


def upload(client, store, *files):
    return client.post(f"/admin/api/rag-stores/{store['id']}/documents", files=[("file", f) for f in files])


def text_file(name, body):
    return (name, body.encode() if isinstance(body, str) else body, "application/octet-stream")


def tiny_docx() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "word/document.xml",
            '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
            "<w:p><w:r><w:t>Hello from Word</w:t></w:r></w:p></w:body></w:document>",
        )
    return buffer.getvalue()


def test_upload_accepts_several_files_as_pending_documents(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(
        api("editor"),
        store,
        text_file("a.txt", "alpha"),
        text_file("b.md", "# B\n\nbeta"),
        text_file("c.docx", tiny_docx()),
    )
    assert response.status_code == 202
    documents = response.json()["documents"]
    assert [(d["filename"], d["status"], d["progress_percent"]) for d in documents] == [
        ("a.txt", "pending", 0),
        ("b.md", "pending", 0),
        ("c.docx", "pending", 0),
    ]
    assert documents[2]["mime"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def test_files_field_name_is_accepted_too(api, fake_connection):
    store = make_store(api, fake_connection)
    response = api("editor").post(
        f"/admin/api/rag-stores/{store['id']}/documents", files=[("files", text_file("a.txt", "alpha"))]
    )
    assert response.status_code == 202


def test_an_upload_without_files_is_a_400(api, fake_connection):
    store = make_store(api, fake_connection)
    response = api("editor").post(
        f"/admin/api/rag-stores/{store['id']}/documents", files=[("other", text_file("a.txt", "x"))]
    )
    assert response.status_code == 400
    assert "no file field in form (use 'file')" in response.json()["error"]["message"]


def test_an_unsupported_file_is_skipped_by_name_and_the_others_are_stored(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, text_file("ok.txt", "fine"), text_file("run.exe", b"MZ\x90\x00"))
    assert response.status_code == 202
    body = response.json()
    assert [d["filename"] for d in body["documents"]] == ["ok.txt"]
    (skipped,) = body["skipped"]
    assert (skipped["filename"], skipped["code"], skipped["existing_document_id"]) == (
        "run.exe",
        "unsupported_format",
        None,
    )
    assert "run.exe" in skipped["message"] and ".pdf" in skipped["message"]
    assert list(Document.objects.values_list("filename", flat=True)) == ["ok.txt"]


def test_a_request_of_only_unsupported_files_is_a_400_with_the_lists(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, text_file("run.exe", b"MZ\x90\x00"))
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == "unsupported_format"
    assert (body["documents"], [s["filename"] for s in body["skipped"]]) == ([], ["run.exe"])
    assert not Document.objects.exists()


def test_a_docx_that_is_not_a_zip_is_refused(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, text_file("report.docx", b"this is not a zip archive"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_format"
    assert '"report.docx" does not look like a docx file' in response.json()["error"]["message"]


def test_an_oversize_file_is_413_and_nothing_is_stored(api, fake_connection, settings):
    settings.MAX_UPLOAD_MB = 1
    store = make_store(api, fake_connection)
    response = upload(
        api("editor"), store, text_file("small.txt", "ok"), text_file("big.txt", b"x" * (1024 * 1024 + 10))
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "upload_too_large"
    assert '"big.txt" is larger than 1 MiB (MAX_UPLOAD_MB)' in response.json()["error"]["message"]
    assert not Document.objects.exists()


def test_identical_bytes_in_the_same_store_are_a_409_naming_the_document(api, fake_connection):
    store = make_store(api, fake_connection)
    editor = api("editor")
    first = upload(editor, store, text_file("a.txt", "same bytes")).json()["documents"][0]
    again = upload(editor, store, text_file("copy.txt", "same bytes"))
    assert again.status_code == 409
    error = again.json()["error"]
    assert error["code"] == "duplicate_document"
    assert error["existing_document_id"] == first["id"]
    assert f'identical to document {first["id"]} ("a.txt")' in error["message"]


def test_the_document_quota_stops_at_the_first_file_that_does_not_fit(api, fake_connection):
    store = make_store(api, fake_connection, max_documents=2)
    response = upload(
        api("editor"), store, text_file("1.txt", "one"), text_file("2.txt", "two"), text_file("3.txt", "three")
    )
    assert response.status_code == 422
    body = response.json()
    assert body["error"]["code"] == "store_quota"
    assert body["error"]["message"] == "store quota exceeded: 2 of 2 documents"
    assert [d["filename"] for d in body["documents"]] == ["1.txt", "2.txt"]
    assert Document.objects.count() == 2


def test_the_byte_quota_names_the_numbers(api, fake_connection):
    store = make_store(api, fake_connection, max_bytes=10)
    editor = api("editor")
    upload(editor, store, text_file("1.txt", "123456"))
    response = upload(editor, store, text_file("2.txt", "abcdef"))
    assert response.status_code == 422
    assert response.json()["error"]["message"] == (
        "store quota exceeded: 6 of 10 bytes used, upload of 6 bytes does not fit"
    )


def test_the_instance_ceiling_is_the_limit_when_smaller(api, fake_connection, settings):
    settings.MAX_DOCUMENTS_PER_STORE = 1
    store = make_store(api, fake_connection, max_documents=5)
    assert store["limits"] == {"max_documents": 1, "max_bytes": 0}
    response = upload(api("editor"), store, text_file("1.txt", "one"), text_file("2.txt", "two"))
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "store quota exceeded: 1 of 1 documents"


def test_a_full_backlog_keeps_documents_as_failed(api, fake_connection, settings):
    settings.MAX_PENDING_DOCUMENTS = 1
    store = make_store(api, fake_connection, max_documents=3)
    editor = api("editor")
    response = upload(editor, store, text_file("1.txt", "one"), text_file("2.txt", "two"))
    assert response.status_code == 503
    body = response.json()
    assert body["error"]["code"] == "backlog_full"
    assert [(d["status"], d["error"]) for d in body["documents"]] == [("pending", ""), ("failed", BACKLOG_FULL)]
    # Failed documents still count towards the quota until they are deleted.
    third = upload(editor, store, text_file("3.txt", "three"))
    assert third.status_code == 503
    assert upload(editor, store, text_file("4.txt", "four")).status_code == 422


def test_documents_failed_by_a_full_backlog_are_retried_in_one_call(api, fake_connection, settings):
    settings.MAX_PENDING_DOCUMENTS = 1
    store = make_store(api, fake_connection)
    editor = api("editor")
    upload(editor, store, *[text_file(f"{n}.txt", f"document {n}") for n in range(4)])
    settings.MAX_PENDING_DOCUMENTS = 100

    response = editor.post(f"/admin/api/rag-stores/{store['id']}/reprocess", json={"status": "failed"})

    assert response.status_code == 202
    assert response.json()["documents"] == 3
    statuses = [d["status"] for d in editor.get(f"/admin/api/rag-stores/{store['id']}/documents").json()["documents"]]
    assert statuses == ["pending"] * 4
    assert api("viewer").post(f"/admin/api/rag-stores/{store['id']}/reprocess", json={}).status_code == 403


def test_a_batch_with_a_duplicate_in_the_middle_stores_every_other_file(api, fake_connection):
    store = make_store(api, fake_connection)
    editor = api("editor")
    first = upload(editor, store, text_file("original.txt", "same bytes")).json()["documents"][0]

    files = [text_file(f"{n}.txt", f"file {n}") for n in range(99)]
    response = upload(editor, store, *files[:10], text_file("copy.txt", "same bytes"), *files[10:])

    assert response.status_code == 202
    body = response.json()
    assert len(body["documents"]) == 99
    assert [(s["filename"], s["code"], s["existing_document_id"]) for s in body["skipped"]] == [
        ("copy.txt", "duplicate_document", first["id"])
    ]


def test_text_ingest_names_the_file_after_the_title(api, fake_connection):
    store = make_store(api, fake_connection)
    response = api("editor").post(
        f"/admin/api/rag-stores/{store['id']}/documents/text",
        json={
            "title": "Release notes / 2.0",
            "content": "All the news.",
            "source": "https://example.com/notes",
            "tags": ["release", "v2"],
        },
    )
    assert response.status_code == 202
    document = response.json()["documents"][0]
    assert document["filename"] == "Release notes 2.0.txt"
    assert (document["title"], document["source"], document["tags"]) == (
        "Release notes / 2.0",
        "https://example.com/notes",
        ["release", "v2"],
    )


def test_text_ingest_is_capped(api, fake_connection, settings):
    settings.TEXT_INGEST_MAX_MB = 1
    store = make_store(api, fake_connection)
    response = api("editor").post(
        f"/admin/api/rag-stores/{store['id']}/documents/text", json={"title": "big", "content": "x" * (1024 * 1024 + 1)}
    )
    assert response.status_code == 413
    assert "TEXT_INGEST_MAX_MB" in response.json()["error"]["message"]


def test_list_filters_by_status_and_pages(api, fake_connection, settings):
    settings.MAX_PENDING_DOCUMENTS = 2
    store = make_store(api, fake_connection)
    upload(api("editor"), store, *[text_file(f"{n}.txt", f"doc {n}") for n in range(3)])
    viewer = api("viewer")
    failed = viewer.get(f"/admin/api/rag-stores/{store['id']}/documents", params={"status": "failed"}).json()
    assert [d["filename"] for d in failed["documents"]] == ["2.txt"]
    page = viewer.get(f"/admin/api/rag-stores/{store['id']}/documents", params={"page": 2, "page_size": 2}).json()
    assert (page["total"], [d["filename"] for d in page["documents"]]) == (3, ["0.txt"])
    past = viewer.get(f"/admin/api/rag-stores/{store['id']}/documents", params={"page": 9, "page_size": 2}).json()
    assert past == {**page, "page": 2}
    none = viewer.get(f"/admin/api/rag-stores/{store['id']}/documents", params={"status": "ready", "page": 3}).json()
    assert none == {"documents": [], "total": 0, "page": 1, "page_size": 50}


def test_download_returns_the_original_bytes(api, fake_connection):
    store = make_store(api, fake_connection)
    document = upload(api("editor"), store, text_file("notes é.txt", b"\xef\xbb\xbfexact bytes")).json()["documents"][0]
    response = api("viewer").get(f"/admin/api/documents/{document['id']}/download")
    assert response.status_code == 200
    assert response.content == b"\xef\xbb\xbfexact bytes"
    assert "notes%20%C3%A9.txt" in response.headers["Content-Disposition"]


def test_delete_removes_chunks_vectors_and_term_statistics(api, fake_connection, ingest_now):
    store = make_store(api, fake_connection)
    editor = api("editor")
    keep, drop = upload(
        editor, store, text_file("keep.txt", "shared words here"), text_file("drop.txt", "shared unique zebra")
    ).json()["documents"]
    ingest_now()
    assert editor.delete(f"/admin/api/documents/{drop['id']}").json() == {"ok": True}
    assert not Chunk.objects.filter(document_id=drop["id"]).exists()
    assert not ChunkTerm.objects.filter(term="zebra").exists()
    # The default `english` index: stems, and "here" is a stop word.
    assert set(StoreTerm.objects.values_list("term", "df")) == {("share", 1), ("word", 1)}
    stats = StoreTextStats.objects.get(store_id=store["id"])
    assert (stats.chunk_count, stats.token_total) == (1, 2)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM chunk_embeddings_8")
        assert cursor.fetchone()[0] == 1


def test_reprocess_one_and_all(api, fake_connection, ingest_now):
    store = make_store(api, fake_connection)
    editor = api("editor")
    documents = upload(editor, store, text_file("a.txt", "alpha"), text_file("b.txt", "beta")).json()["documents"]
    ingest_now()
    one = editor.post(f"/admin/api/documents/{documents[0]['id']}/reprocess")
    assert one.status_code == 202
    assert one.json()["document"]["status"] == "pending"
    everything = editor.post(f"/admin/api/rag-stores/{store['id']}/reprocess")
    assert everything.status_code == 202
    assert everything.json() == {"ok": True, "documents": 2}
    ingest_now()
    assert set(Document.objects.values_list("status", flat=True)) == {"ready"}


def test_an_encrypted_pdf_without_readable_text_fails_as_encrypted_not_as_scanned(api, fake_connection, ingest_now):
    from tests.ingestion.files.make_hostile import encrypted_pdf_partly_unreadable

    store = make_store(api, fake_connection)
    editor = api("editor")
    [document] = upload(editor, store, text_file("sealed.pdf", encrypted_pdf_partly_unreadable())).json()["documents"]
    ingest_now()

    failed = editor.get(f"/admin/api/documents/{document['id']}").json()
    assert failed["status"] == "failed"
    assert "encrypted" in failed["error"] and "scanned" not in failed["error"]


MALFORMED_BODIES = [
    (b'{"unterminated', "application/json"),
    (b"[1, 2]", "application/json"),
    (b'"all"', "application/json"),
    (b'{"status": "failed"}', "application/json"),
    (b'{"force": true}', "application/json"),
    (b"force=1", "application/x-www-form-urlencoded"),
    (b"\x00" * 64, "application/json"),
    (b"reprocess please", "text/plain"),
]


@pytest.mark.parametrize(("body", "content_type"), MALFORMED_BODIES)
def test_reprocessing_a_document_refuses_a_body_and_queues_nothing(
    api, fake_connection, ingest_now, body, content_type
):
    store = make_store(api, fake_connection)
    editor = api("editor")
    [document] = upload(editor, store, text_file("a.txt", "alpha")).json()["documents"]
    ingest_now()

    refused = editor.post(
        f"/admin/api/documents/{document['id']}/reprocess", content=body, headers={"Content-Type": content_type}
    )

    assert 400 <= refused.status_code < 500, refused.text
    assert refused.json()["error"]["code"]
    assert Document.objects.get(pk=document["id"]).status == "ready"
    assert editor.post(f"/admin/api/documents/{document['id']}/reprocess", json={}).status_code == 202


@pytest.mark.parametrize("persona", ["viewer", "outsider"])
def test_viewers_cannot_change_documents(api, fake_connection, persona):
    store = make_store(api, fake_connection)
    document = upload(api("editor"), store, text_file("a.txt", "alpha")).json()["documents"][0]
    client = api(persona)
    attempts = [
        upload(client, store, text_file("b.txt", "beta")),
        client.post(f"/admin/api/rag-stores/{store['id']}/documents/text", json={"title": "t", "content": "c"}),
        client.delete(f"/admin/api/documents/{document['id']}"),
        client.post(f"/admin/api/documents/{document['id']}/reprocess"),
        client.post(f"/admin/api/rag-stores/{store['id']}/reprocess"),
    ]
    assert [r.status_code for r in attempts] == [403] * 5
    assert Document.objects.count() == 1


def test_viewers_read_documents_and_strangers_do_not(api, fake_connection):
    store = make_store(api, fake_connection)
    document = upload(api("editor"), store, text_file("a.txt", "alpha")).json()["documents"][0]
    assert api("viewer").get(f"/admin/api/documents/{document['id']}").status_code == 200
    assert api("outsider").get(f"/admin/api/documents/{document['id']}").status_code == 403
    assert api().get(f"/admin/api/documents/{document['id']}").status_code == 401
    assert (
        api()
        .post(f"/admin/api/rag-stores/{store['id']}/documents", files=[("file", text_file("x.txt", "x"))])
        .status_code
        == 401
    )


def test_concurrent_uploads_never_exceed_the_quota(api, fake_connection, transactional_db):
    # Each thread has its own connection: the store must be committed for them to see it.
    from concurrent.futures import ThreadPoolExecutor

    store = make_store(api, fake_connection, max_documents=5)
    clients = [api("editor") for _ in range(10)]

    def send(n):
        return upload(clients[n], store, text_file(f"{n}.txt", f"distinct document {n}")).status_code

    with ThreadPoolExecutor(max_workers=10) as pool:
        statuses = list(pool.map(send, range(10)))
    assert sorted(statuses) == [202] * 5 + [422] * 5
    assert Document.objects.filter(store_id=store["id"]).count() == 5


def test_empty_files_are_skipped_at_upload_as_empty(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(
        api("editor"), store, text_file("471.txt", b""), text_file("995.txt", b""), text_file("kept.txt", b"words")
    )
    assert response.status_code == 202
    assert [(s["filename"], s["code"], s["message"]) for s in response.json()["skipped"]] == [
        ("471.txt", "empty_file", '"471.txt" is empty (0 bytes)'),
        ("995.txt", "empty_file", '"995.txt" is empty (0 bytes)'),
    ]
    assert list(Document.objects.values_list("filename", flat=True)) == ["kept.txt"]


def test_an_upload_of_only_empty_files_is_refused_as_empty(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, text_file("471.txt", b""))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "empty_file"
    assert not Document.objects.exists()


def test_an_executable_renamed_pdf_is_refused_at_upload_like_any_format(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, ("setup.pdf", b"MZ\x90\x00" + b"\x00" * 60, "application/pdf"))
    assert response.status_code == 400
    assert response.json()["error"]["message"] == '"setup.pdf" does not look like a pdf file (no %PDF header)'
    assert not Document.objects.exists()


def test_an_upload_is_accepted_while_redis_is_unreachable_and_the_sweep_ingests_it(
    api, fake_connection, transactional_db, redis_unreachable, caplog, monkeypatch
):
    from ingestion.tasks import requeue_expired_leases
    from ragmux.celery import app

    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, text_file("a.txt", "alpha"), text_file("b.txt", "beta"))

    assert response.status_code == 202
    assert [d["status"] for d in response.json()["documents"]] == ["pending", "pending"]
    lost = [record for record in caplog.records if record.name == "ragmux.wakeups"]
    # Each document's wake-up is one warning line, without a traceback; the outage is one more.
    assert [(record.levelname, record.exc_info) for record in lost] == [("WARNING", None)] * 2
    assert [record.levelname for record in caplog.records if record.name == "ragmux.redis"] == ["WARNING"]
    # The scheduler runs this sweep every INGEST_REQUEUE_INTERVAL; finding documents queued, it
    # wakes a worker, which drains the queue (run here in this process, eagerly).
    monkeypatch.setitem(app.conf, "task_always_eager", True)
    requeue_expired_leases()
    assert set(Document.objects.filter(store_id=store["id"]).values_list("status", flat=True)) == {"ready"}


def test_an_upload_answers_within_seconds_while_redis_hangs(api, fake_connection, transactional_db, redis_hung):
    store = make_store(api, fake_connection)
    editor = api("editor")
    answers = []
    # A thread of its own, so that a wake-up that waits forever fails the test instead of hanging it.
    sending = threading.Thread(
        target=lambda: answers.append(upload(editor, store, text_file("a.txt", "alpha"), text_file("b.txt", "beta"))),
        daemon=True,
    )
    sending.start()
    sending.join(timeout=15)  # a publish gives up after about a second, and the second is not tried
    assert [answer.status_code for answer in answers] == [202]


def test_slides_sheets_books_mail_and_images_are_accepted_with_their_types(api, fake_connection):
    from tests.ingestion.files.make_documents import book_epub, image_of_text, nested_eml, slides_pptx, workbook_xlsx

    store = make_store(api, fake_connection)
    files = {
        "deck.pptx": slides_pptx(),
        "budget.xlsx": workbook_xlsx(),
        "export.csv": b"a,b\n1,2\n",
        "guide.epub": book_epub(),
        "message.eml": nested_eml(),
        "gate.png": image_of_text("Keep the gate closed", "PNG"),
        "photo.jpg": image_of_text("A photo of a page", "JPEG"),
        "fax.tiff": image_of_text("A fax", "TIFF"),
        "phone.webp": image_of_text("A phone picture", "WEBP"),
    }
    response = upload(api("editor"), store, *(text_file(name, data) for name, data in files.items()))

    assert response.status_code == 202, response.text
    assert [(d["filename"], d["mime"], d["warnings"], d["ocr_pages"]) for d in response.json()["documents"]] == [
        ("deck.pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation", [], 0),
        ("budget.xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", [], 0),
        ("export.csv", "text/csv", [], 0),
        ("guide.epub", "application/epub+zip", [], 0),
        ("message.eml", "message/rfc822", [], 0),
        ("gate.png", "image/png", [], 0),
        ("photo.jpg", "image/jpeg", [], 0),
        ("fax.tiff", "image/tiff", [], 0),
        ("phone.webp", "image/webp", [], 0),
    ]


def test_an_image_named_as_another_format_is_refused_at_upload(api, fake_connection):
    from tests.ingestion.files.make_documents import image_of_text

    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, text_file("scan.png", image_of_text("words", "JPEG")))

    assert response.status_code == 400
    assert response.json()["error"]["message"] == '"scan.png" does not look like a png file (no PNG signature)'
