"""Attributes, filters and key scopes on the dashboard: set at upload and on pasted text, shown
and edited on a document's row (editors), filtering the search compare, and a key's document
scope on its forms (admins); a bad JSON or value is said beside its input and saves nothing."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from gateway.clients.models import GatewayKey
from gateway.clients.services import key_create
from ingestion.services import IncomingFile, document_upload
from stores.models import Document
from tests.factories import DocumentFactory, ProjectFactory
from tests.helpers import post
from tests.ragmux.dashboard.test_pages import outcomes, upload

pytestmark = pytest.mark.django_db

ACME = {"type": "eq", "key": "customer", "value": "acme"}


def upload_with(client, store, attributes, *named):
    from django.core.files.uploadedfile import SimpleUploadedFile

    files = [SimpleUploadedFile(name, data) for name, data in named]
    return post(
        client, f"/admin/stores/{store.pk}/upload", {"files": files, "attributes": attributes}, HTTP_HX_REQUEST="true"
    )


def test_an_upload_gives_its_files_the_attributes_typed(as_role, kb):
    response = upload_with(as_role("editor"), kb, '{"customer": "acme", "year": 2024}', ("a.txt", b"a"))
    assert outcomes(response) == ["a.txt: accepted — queued for ingestion"]
    assert Document.objects.get(store=kb).attributes == {"customer": "acme", "year": 2024}


@pytest.mark.parametrize(("typed", "says"), [("{customer", "JSON"), ('{"a": {"b": 1}}', "a string, a number")])
def test_bad_attributes_store_no_file_and_say_why(as_role, kb, typed, says):
    (line,) = outcomes(upload_with(as_role("editor"), kb, typed, ("a.txt", b"a")))
    assert line.startswith("a.txt: not stored — The attributes were refused:") and says in line
    assert not Document.objects.exists()


def test_an_upload_without_attributes_still_works(as_role, kb):
    assert outcomes(upload(as_role("editor"), kb, ("a.txt", b"a"))) == ["a.txt: accepted — queued for ingestion"]
    assert Document.objects.get(store=kb).attributes == {}


def test_pasted_text_takes_attributes_and_bad_ones_keep_the_form(as_role, kb):
    editor = as_role("editor")
    body = {"title": "Tide", "content": "Low water.", "attributes": '{"customer": "acme"}'}
    assert post(editor, f"/admin/stores/{kb.pk}/text", body).status_code == 302
    assert Document.objects.get(store=kb).attributes == {"customer": "acme"}
    refused = post(editor, f"/admin/stores/{kb.pk}/text", {**body, "title": "Other", "attributes": "[1]"})
    assert refused.status_code == 400
    html = refused.content.decode()
    assert 'id="errors_text-attributes"' in html and "JSON object" in html
    assert Document.objects.count() == 1


def test_a_documents_row_shows_its_attributes_and_editors_edit_them(as_role, kb):
    document = DocumentFactory(store=kb, attributes={"customer": "acme", "public": True}, tags=["hr"])
    page = as_role("viewer").get(f"/admin/stores/{kb.pk}/").content.decode()
    assert "<dt>customer</dt><dd>acme</dd>" in page and "<dt>public</dt><dd>true</dd>" in page
    assert "<dt>tags</dt><dd>hr</dd>" in page
    assert "Edit attributes" not in page  # a viewer edits nothing
    editor = as_role("editor")
    assert "Edit attributes" in editor.get(f"/admin/stores/{kb.pk}/").content.decode()
    url = f"/admin/documents/{document.pk}/metadata"
    response = post(editor, url, {"attributes": '{"customer": "globex"}', "tags": "legal, hr"})
    assert response.status_code == 302
    document.refresh_from_db()
    assert (document.attributes, document.tags) == ({"customer": "globex"}, ["legal", "hr"])
    refused = post(editor, url, {"attributes": '{"tags": "x"}', "tags": ""})
    assert "was not saved" in editor.get(refused["Location"]).content.decode()
    document.refresh_from_db()
    assert document.attributes == {"customer": "globex"}


@pytest.mark.parametrize("role", ["viewer", "outsider"])
def test_only_editors_edit_a_documents_attributes(as_role, kb, role):
    document = DocumentFactory(store=kb, attributes={"customer": "acme"})
    response = post(as_role(role), f"/admin/documents/{document.pk}/metadata", {"attributes": "{}", "tags": ""})
    assert response.status_code == 403
    document.refresh_from_db()
    assert document.attributes == {"customer": "acme"}


@pytest.fixture
def tenants(kb, ingest_now):
    files = [
        IncomingFile("acme.txt", b"Tide tables for acme.", attributes={"customer": "acme"}),
        IncomingFile("globex.txt", b"Tide tables for globex.", attributes={"customer": "globex"}),
    ]
    assert document_upload(store=kb, files=files).refusal is None
    ingest_now()
    return kb


def compare(store, filters: str) -> str:
    query = {"store": store.pk, "q": "tide", "a-mode": "lexical", "b-mode": "vector", "filters": filters}
    return "/admin/search/?" + urlencode(query)


def test_the_search_compare_filters_both_configurations(as_role, tenants):
    html = as_role("viewer").get(compare(tenants, json.dumps(ACME))).content.decode()
    assert html.count("acme.txt") >= 2 and "globex.txt" not in html
    unfiltered = as_role("viewer").get(compare(tenants, "")).content.decode()
    assert "globex.txt" in unfiltered


def test_a_bad_filter_is_said_beside_its_input(as_role, tenants):
    html = as_role("viewer").get(compare(tenants, '{"type": "eq", "key": "customer"}')).content.decode()
    assert 'id="errors_filters"' in html and "lacks" in html
    assert "globex.txt" not in html


@pytest.fixture
def project(db):
    return ProjectFactory(name="shared")


def test_an_admin_scopes_a_key_on_create_and_edit_and_its_row_shows_it(as_role, project):
    admin = as_role("admin")
    created = post(
        admin,
        f"/admin/projects/{project.pk}/keys",
        {"name": "acme", "scopes": ["retrieve"], "filters": json.dumps(ACME)},
    )
    assert created.status_code == 201
    key = GatewayKey.objects.get(name="acme")
    assert key.filters == ACME
    assert "documents: <code>" in admin.get(f"/admin/projects/{project.pk}/").content.decode()
    url = f"/admin/keys/{key.pk}/edit"
    assert "&quot;customer&quot;" in admin.get(url).content.decode()  # the scope in its input
    globex = {"type": "eq", "key": "customer", "value": "globex"}
    assert post(admin, url, {"name": "acme", "scopes": ["retrieve"], "filters": json.dumps(globex)}).status_code == 302
    key.refresh_from_db()
    assert key.filters == globex
    refused = post(admin, url, {"name": "acme", "scopes": ["retrieve"], "filters": '{"type": "like"}'})
    assert refused.status_code == 400 and 'id="errors_filters"' in refused.content.decode()
    key.refresh_from_db()
    assert key.filters == globex
    assert post(admin, url, {"name": "acme", "scopes": ["retrieve"], "filters": ""}).status_code == 302
    key.refresh_from_db()
    assert key.filters is None


@pytest.mark.parametrize("role", ["editor", "viewer"])
def test_only_admins_scope_a_key(as_role, project, role):
    key = key_create(project=project, name="app", scopes=None, expires_at=None).api_key
    response = post(as_role(role), f"/admin/keys/{key.pk}/edit", {"name": "app", "filters": json.dumps(ACME)})
    assert response.status_code == 403
    key.refresh_from_db()
    assert key.filters is None


def test_the_key_form_offers_the_file_scopes_and_a_key_keeps_them(as_role, project):
    admin = as_role("admin")
    page = admin.get(f"/admin/projects/{project.pk}/").content.decode()
    assert 'value="files_read"' in page and 'value="files_write"' in page
    created = post(admin, f"/admin/projects/{project.pk}/keys", {"name": "uploader", "scopes": ["files_write"]})
    assert created.status_code == 201
    assert GatewayKey.objects.get(name="uploader").scopes == ["files_write"]
