"""The audit trail's filters by action prefix and by document, its NDJSON export link, the
sign-ins page (refused attempts and lockouts) and the store page's link from each document to
its entries, through Django's test client."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from ragmux.core.audit import audit_record
from tests.factories import PASSWORD, DocumentFactory
from tests.fixtures import PERSONAS
from tests.helpers import post, text

pytestmark = pytest.mark.django_db


def test_the_audit_page_filters_by_action_prefix_and_by_document(as_role, kb):
    first, second = DocumentFactory(store=kb, filename="first.txt"), DocumentFactory(store=kb, filename="second.txt")
    for document in (first, second):
        audit_record(
            actor=None, action="document.upload", object_type="document", object_id=document.pk, object_repr=document
        )
    audit_record(actor=None, action="user.update", object_type="user", object_id=first.pk, object_repr="erin")
    admin = as_role("admin")

    documents = text(admin.get("/admin/audit/", {"action": "document"}))
    assert "2 entries" in documents and "first.txt" in documents and "erin" not in documents
    one = admin.get("/admin/audit/", {"document": first.pk})
    assert "1 entry" in text(one) and "second.txt" not in text(one)
    export = re.search(r'href="([^"]+)">Export these as NDJSON', one.content.decode()).group(1).replace("&amp;", "&")
    assert urlsplit(export).path == "/admin/api/audit.ndjson"
    assert parse_qs(urlsplit(export).query) == {"document": [str(first.pk)]}

    refused = admin.get("/admin/audit/", {"document": "first"})
    assert refused.status_code == 400 and 'id="id_document" name="document"' in refused.content.decode()
    assert "Export these as NDJSON" not in refused.content.decode()


def test_the_store_page_links_each_document_to_its_entries_for_admins(as_role, kb):
    document = DocumentFactory(store=kb, filename="memo.txt")
    link = f'href="/admin/audit/?document={document.pk}"'
    assert link in as_role("admin").get(f"/admin/stores/{kb.pk}/").content.decode()
    assert link in as_role("admin").get(f"/admin/stores/{kb.pk}/documents").content.decode()
    # The audit trail is the admins': others are not offered a page they cannot open.
    for role in ("editor", "viewer"):
        assert link not in as_role(role).get(f"/admin/stores/{kb.pk}/").content.decode(), role


def test_the_sign_ins_page_is_the_admins_and_a_page_only(as_role, client, personas):
    for persona in PERSONAS:
        response = as_role(persona).get("/admin/security/sign-ins/")
        assert response.status_code == (200 if persona == "admin" else 403), persona
    assert client.get("/admin/security/sign-ins/").status_code == 302
    assert post(as_role("admin"), "/admin/security/sign-ins/").status_code == 405
    assert 'href="/admin/security/sign-ins/"' in as_role("admin").get("/admin/audit/").content.decode()
    assert "/admin/security/sign-ins/" not in as_role("editor").get("/admin/").content.decode()


def test_the_sign_ins_page_shows_refused_attempts_and_lockouts(as_role, personas, settings):
    settings.LOGIN_USER_LIMIT_PER_MIN = 0
    settings.LOGIN_RATE_LIMIT_PER_MIN = 0
    settings.LOGIN_LOCKOUT_FAILURES = 2
    quiet = text(as_role("admin").get("/admin/security/sign-ins/"))
    assert "No username is locked out" in quiet and "No sign-in was refused" in quiet

    stranger = Client(REMOTE_ADDR="198.51.100.77")
    for _ in range(3):
        stranger.post("/admin/login/", {"username": "viewer", "password": "guess"})
    page = text(as_role("admin").get("/admin/security/sign-ins/"))
    assert "Last hour 2 Last 24 hours 2" in page
    assert re.search(r"viewer 198\.51\.100\.77 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", page)  # the lockout
    assert page.count("viewer 198.51.100.77 refused: wrong password") == 2
    assert "viewer 198.51.100.77 locked out: too many failures from this address" in page
    assert PASSWORD not in page
