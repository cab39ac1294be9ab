"""Each action the audit trail records is written by the action that causes it, done over HTTP
as a client or a user does it, and carries the client's address (the peer's, or the one a
trusted proxy reports): sign-ins and sign-outs through the API and the sign-in form, uploads,
deletes and reprocessing through the API and the dashboard, and exports of the trail itself.
The trail's API filters by action prefix and by document, and exports as NDJSON."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from ragmux.core.audit import audit_record
from ragmux.core.models import AuditEntry
from stores.models import Document
from tests.factories import PASSWORD, DocumentFactory
from tests.helpers import post

ADDRESS = "203.0.113.9"
# A proxy we trust appended the last address; the first is the client's to invent.
FORWARDED = {"X-Forwarded-For": f"198.51.100.1, {ADDRESS}"}
PEER = "192.0.2.44"


@pytest.fixture
def behind_proxy(settings):
    settings.TRUST_PROXY_HEADERS = True


@pytest.fixture
def store(fake_connection):
    from stores.services import store_create

    return store_create(name="kb", values={"embedding_connection_id": fake_connection.pk})


def trail(*prefixes: str) -> list[tuple]:
    """(action, who, object type, object id, object, address) of each row whose action starts
    with one of ``prefixes`` (of every row without), oldest first."""
    rows = AuditEntry.objects.order_by("id").values_list(
        "action", "actor_username", "object_type", "object_id", "object_repr", "client_address"
    )
    return [row for row in rows if row[0].startswith(prefixes or "")]


def login(client, username, password, **body):
    return client.post("/admin/api/login", json={"username": username, "password": password, **body}, headers=FORWARDED)


# --- signing in and out -----------------------------------------------------------------------


def test_each_sign_in_outcome_and_sign_out_over_the_api_is_audited(api, personas, behind_proxy, settings):
    settings.LOGIN_USER_LIMIT_PER_MIN = 1
    client = api()
    token = login(client, "admin", PASSWORD, bearer=True).json()["token"]
    assert login(client, "Viewer", "wrong").status_code == 401
    assert login(client, "viewer", PASSWORD).status_code == 429  # one failure a minute allowed
    settings.LOGIN_USER_LIMIT_PER_MIN = 0
    settings.LOGIN_LOCKOUT_FAILURES = 1
    assert login(client, "editor", "wrong").status_code == 401
    locked = login(client, "editor", PASSWORD)
    assert locked.status_code == 429 and locked.json()["error"]["locked"] is True
    signed_out = client.post("/admin/api/logout", headers={"Authorization": f"Bearer {token}", **FORWARDED})
    assert signed_out.json() == {"ok": True}

    admin = personas["admin"].pk
    assert trail() == [
        ("login.success", "admin", "user", admin, "admin", ADDRESS),
        ("login.failure", "anonymous", "user", None, "Viewer", ADDRESS),
        ("login.throttled", "anonymous", "user", None, "viewer", ADDRESS),
        ("login.failure", "anonymous", "user", None, "editor", ADDRESS),
        ("login.locked", "anonymous", "user", None, "editor", ADDRESS),
        ("logout", "admin", "user", admin, "admin", ADDRESS),
    ]
    assert AuditEntry.objects.get(action="login.success").actor_id == admin
    assert PASSWORD not in str(list(AuditEntry.objects.values()))


def test_the_sign_in_form_and_sign_out_are_audited_with_the_peer_address(personas):
    browser = Client(REMOTE_ADDR=PEER)
    # Without a trusted proxy its header is the client's own words, and ignored.
    wrong = browser.post("/admin/login/", {"username": "editor", "password": "wrong"}, HTTP_X_FORWARDED_FOR=ADDRESS)
    assert wrong.status_code == 200
    assert browser.post("/admin/login/", {"username": "editor", "password": PASSWORD}).status_code == 302
    assert browser.post("/admin/logout/").status_code == 302
    assert browser.post("/admin/logout/").status_code == 302  # no one is signed in: nothing to audit

    editor = personas["editor"].pk
    assert trail() == [
        ("login.failure", "anonymous", "user", None, "editor", PEER),
        ("login.success", "editor", "user", editor, "editor", PEER),
        ("logout", "editor", "user", editor, "editor", PEER),
    ]


def test_a_row_written_outside_a_request_has_no_address(api, personas, behind_proxy):
    login(api(), "admin", PASSWORD)
    # The request's address does not stay behind in this thread for what it does next.
    entry = audit_record(actor=None, action="store.delete", object_type="store", object_id=1, object_repr="kb")
    assert (entry.actor_username, entry.client_address) == ("system", "")


def test_an_address_longer_than_the_column_is_cut_not_refused(api, personas, behind_proxy):
    long_address = "x" * 500
    response = api().post(
        "/admin/api/login",
        json={"username": "admin", "password": PASSWORD},
        headers={"X-Forwarded-For": long_address},
    )
    assert response.status_code == 200
    assert trail() == [("login.success", "admin", "user", personas["admin"].pk, "admin", "x" * 64)]


# --- documents --------------------------------------------------------------------------------


def test_documents_uploaded_deleted_and_reprocessed_over_the_api_are_audited(api, store, personas, behind_proxy):
    editor = api("editor")
    editor.headers.update(FORWARDED)
    uploaded = editor.post(
        f"/admin/api/rag-stores/{store.pk}/documents",
        files=[("file", ("a.txt", b"alpha", "text/plain")), ("file", ("b.md", b"# beta", "text/plain"))],
    )
    assert uploaded.status_code == 202
    a, b = (document["id"] for document in uploaded.json()["documents"])
    # A duplicate is skipped: nothing is stored, so nothing is audited.
    duplicate = editor.post(f"/admin/api/rag-stores/{store.pk}/documents", files=[("file", ("again.txt", b"alpha"))])
    assert duplicate.status_code == 409
    text = editor.post(f"/admin/api/rag-stores/{store.pk}/documents/text", json={"title": "Memo", "content": "gamma"})
    c = text.json()["documents"][0]["id"]
    assert editor.post(f"/admin/api/documents/{a}/reprocess").status_code == 202
    assert editor.post(f"/admin/api/rag-stores/{store.pk}/reprocess", json={}).json()["documents"] == 3
    assert editor.delete(f"/admin/api/documents/{b}").json() == {"ok": True}

    assert trail("document.", "store.reprocess") == [
        ("document.upload", "editor", "document", a, "a.txt", ADDRESS),
        ("document.upload", "editor", "document", b, "b.md", ADDRESS),
        ("document.upload", "editor", "document", c, "Memo.txt", ADDRESS),
        ("document.reprocess", "editor", "document", a, "a.txt", ADDRESS),
        # The store's reprocess: a row per document it queued, then the store's own.
        ("document.reprocess", "editor", "document", a, "a.txt", ADDRESS),
        ("document.reprocess", "editor", "document", b, "b.md", ADDRESS),
        ("document.reprocess", "editor", "document", c, "Memo.txt", ADDRESS),
        ("store.reprocess", "editor", "store", store.pk, "kb", ADDRESS),
        ("document.delete", "editor", "document", b, "b.md", ADDRESS),
    ]
    uploaded_a = AuditEntry.objects.get(action="document.upload", object_id=a)
    assert uploaded_a.after == {"store_id": store.pk, "filename": "a.txt", "size_bytes": 5, "status": "pending"}
    assert AuditEntry.objects.get(action="store.reprocess").after == {"documents": 3, "status": "any"}
    assert AuditEntry.objects.get(action="document.delete").before["filename"] == "b.md"


def test_a_refused_upload_and_a_refused_role_leave_no_row(api, store, personas):
    store.max_documents = 1
    store.save()
    over = api("editor").post(
        f"/admin/api/rag-stores/{store.pk}/documents",
        files=[("file", ("a.txt", b"alpha")), ("file", ("b.txt", b"beta"))],
    )
    assert over.status_code == 422 and over.json()["error"]["code"] == "store_quota"
    # The first document was stored before the quota stopped the second: it alone is audited.
    assert [row[4] for row in trail("document.")] == ["a.txt"]
    viewer = api("viewer")
    document = Document.objects.get()
    assert viewer.delete(f"/admin/api/documents/{document.pk}").status_code == 403
    assert viewer.post(f"/admin/api/documents/{document.pk}/reprocess").status_code == 403
    assert [row[0] for row in trail("document.")] == ["document.upload"]


def test_documents_uploaded_deleted_and_reprocessed_in_the_dashboard_are_audited(store, personas):
    from django.core.files.uploadedfile import SimpleUploadedFile

    browser = Client(REMOTE_ADDR=PEER)
    browser.force_login(personas["editor"])
    files = [SimpleUploadedFile("a.txt", b"alpha"), SimpleUploadedFile("b.txt", b"beta")]
    assert post(browser, f"/admin/stores/{store.pk}/upload", {"files": files}).status_code == 302
    post(browser, f"/admin/stores/{store.pk}/text", {"title": "Memo", "content": "gamma"})
    a, b, memo = Document.objects.order_by("id")
    failed = DocumentFactory(store=store, status="failed", error="no text found")
    post(browser, f"/admin/documents/{a.pk}/reprocess")
    post(browser, f"/admin/stores/{store.pk}/reprocess", {"status": "failed"})  # "Retry all failed"
    post(browser, f"/admin/documents/{b.pk}/delete")

    assert trail("document.", "store.reprocess") == [
        ("document.upload", "editor", "document", a.pk, "a.txt", PEER),
        ("document.upload", "editor", "document", b.pk, "b.txt", PEER),
        ("document.upload", "editor", "document", memo.pk, "Memo.txt", PEER),
        ("document.reprocess", "editor", "document", a.pk, "a.txt", PEER),
        ("document.reprocess", "editor", "document", failed.pk, failed.filename, PEER),
        ("store.reprocess", "editor", "store", store.pk, "kb", PEER),
        ("document.delete", "editor", "document", b.pk, "b.txt", PEER),
    ]
    assert AuditEntry.objects.get(action="store.reprocess").after == {"documents": 1, "status": "failed"}


# --- reading the trail: filters and the NDJSON export -----------------------------------------


def test_the_trail_filters_by_action_prefix_and_by_document(api, store, personas):
    first, second = DocumentFactory(store=store), DocumentFactory(store=store)
    for document in (first, second):
        audit_record(
            actor=None, action="document.upload", object_type="document", object_id=document.pk, object_repr="d"
        )
    audit_record(actor=None, action="document.delete", object_type="document", object_id=first.pk, object_repr="d")
    # A store with the document's id is another object.
    audit_record(actor=None, action="store.update", object_type="store", object_id=first.pk, object_repr="kb")
    login(api(), "viewer", "wrong")
    admin = api("admin")

    def actions(**params):
        response = admin.get("/admin/api/audit", params=params)
        assert response.status_code == 200, response.text
        return [(entry["action"], entry["object_id"]) for entry in reversed(response.json()["entries"])]

    assert actions(action="login.") == [("login.failure", None)]
    assert actions(action="document") == [
        ("document.upload", first.pk),
        ("document.upload", second.pk),
        ("document.delete", first.pk),
    ]
    assert actions(document=first.pk) == [("document.upload", first.pk), ("document.delete", first.pk)]
    assert actions(document=first.pk, action="document.del") == [("document.delete", first.pk)]
    assert actions(action="nothing.") == []
    refused = admin.get("/admin/api/audit", params={"document": "first"})
    assert refused.status_code == 400 and "document" in refused.json()["error"]["fields"]


def ndjson(response) -> list[dict]:
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines()]


def test_the_export_is_ndjson_of_the_filtered_trail_and_is_itself_audited(api, personas, behind_proxy, monkeypatch):
    # Small batches, so that the export crosses several and rows with the same time stay in order.
    monkeypatch.setattr("ragmux.core.views.EXPORT_BATCH", 2)
    moment = timezone.now() - timedelta(hours=1)
    for n in range(5):
        entry = audit_record(actor=None, action="price.update", object_type="price", object_id=n, object_repr="p")
        AuditEntry.objects.filter(pk=entry.pk).update(created_at=moment if n < 4 else moment - timedelta(days=1))
    login(api(), "viewer", "wrong")
    admin = api("admin")
    admin.headers.update(FORWARDED)

    response = admin.get("/admin/api/audit.ndjson", params={"action": "price."}, headers={"Accept": "*/*"})
    lines = ndjson(response)
    assert response.headers["Content-Disposition"].startswith('attachment; filename="ragmux-audit-')
    assert [line["object_id"] for line in lines] == [3, 2, 1, 0, 4]  # newest first, ties by id
    same_as_the_api = admin.get("/admin/api/audit", params={"action": "price."}).json()["entries"]
    assert lines == same_as_the_api

    (exported,) = AuditEntry.objects.filter(action="audit.exported")
    assert (exported.actor_username, exported.object_type, exported.client_address) == ("admin", "audit", ADDRESS)
    assert exported.after == {"filters": {"action": "price."}}
    # The export of everything starts with the row of the export before it... and its own.
    everything = ndjson(admin.get("/admin/api/audit.ndjson"))
    assert [line["action"] for line in everything[:3]] == ["audit.exported", "audit.exported", "login.failure"]
    assert everything[2]["client_address"] == ADDRESS


def test_only_admins_export_and_a_refused_export_writes_nothing(api, personas):
    for persona in ("editor", "viewer", "outsider"):
        assert api(persona).get("/admin/api/audit.ndjson").status_code == 403, persona
    assert api().get("/admin/api/audit.ndjson").status_code == 401
    bad = api("admin").get("/admin/api/audit.ndjson", params={"since": "yesterday"})
    assert bad.status_code == 400 and bad.json()["error"]["fields"]["since"]
    assert api("admin").post("/admin/api/audit.ndjson").status_code == 405
    assert not AuditEntry.objects.filter(action="audit.exported").exists()
