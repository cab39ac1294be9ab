"""A document's attributes through the admin API: set at upload (multipart field holding JSON,
the text endpoint's field), edited by PATCH (editors and admins, audited), shown with the
document; anything but a flat object within OpenAI's limits is a 400 in the error envelope."""

import json

import pytest

from ragmux.core.models import AuditEntry
from tests.stores.test_document_api import make_store, text_file

ATTRIBUTES = {"customer": "acme", "year": 2024, "public": True, "score": 0.5}


def upload(client, store, attributes, *files):
    data = {} if attributes is None else {"attributes": attributes}
    return client.post(
        f"/admin/api/rag-stores/{store['id']}/documents",
        files=[("file", f) for f in files or [text_file("a.txt", "alpha")]],
        data=data,
    )


def text_document(client, store, **body):
    return client.post(
        f"/admin/api/rag-stores/{store['id']}/documents/text", json={"title": "Policy", "content": "text", **body}
    )


def test_an_upload_sets_its_attributes_on_every_file(api, fake_connection):
    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, json.dumps(ATTRIBUTES), text_file("a.txt", "a"), text_file("b.txt", "b"))
    assert response.status_code == 202, response.text
    assert [d["attributes"] for d in response.json()["documents"]] == [ATTRIBUTES, ATTRIBUTES]
    listed = api("viewer").get(f"/admin/api/rag-stores/{store['id']}/documents").json()["documents"]
    assert [d["attributes"] for d in listed] == [ATTRIBUTES, ATTRIBUTES]


def test_an_upload_without_attributes_has_none(api, fake_connection):
    store = make_store(api, fake_connection)
    assert upload(api("editor"), store, None).json()["documents"][0]["attributes"] == {}


def test_the_text_endpoint_takes_attributes_as_an_object(api, fake_connection):
    store = make_store(api, fake_connection)
    response = text_document(api("editor"), store, attributes=ATTRIBUTES, tags=["hr"])
    assert response.status_code == 202, response.text
    document = response.json()["documents"][0]
    assert (document["attributes"], document["tags"]) == (ATTRIBUTES, ["hr"])


HOSTILE_ATTRIBUTES = [
    ("not json", "JSON"),
    ("[1, 2]", "JSON object"),
    ('{"a": {"nested": 1}}', "a string, a number or a boolean"),
    ('{"a": [1]}', "a string, a number or a boolean"),
    ('{"a": null}', "a string, a number or a boolean"),
    (json.dumps({f"k{n}": n for n in range(17)}), "at most 16 keys"),
    (json.dumps({"k" * 65: 1}), "1 to 64 characters"),
    (json.dumps({"a": "x" * 513}), "longer than 512"),
    (json.dumps({"a": "nul\x00"}), "NUL"),
    (json.dumps({"nul\x00": 1}), "NUL"),
    (json.dumps({"tags": "x"}), "reserved"),
    ('{"a": 1e999}', "finite"),
    (json.dumps({"a": 2**64}), "2^53"),
]


@pytest.mark.parametrize(("attributes", "says"), HOSTILE_ATTRIBUTES)
def test_hostile_attributes_at_upload_are_a_400_and_store_nothing(api, fake_connection, attributes, says):
    store = make_store(api, fake_connection)
    response = upload(api("editor"), store, attributes)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert says in json.dumps(error["fields"]["attributes"]).replace("\\", "")
    assert api("viewer").get(f"/admin/api/rag-stores/{store['id']}/documents").json()["total"] == 0


@pytest.mark.parametrize(("attributes", "says"), HOSTILE_ATTRIBUTES[1:])
def test_hostile_attributes_on_the_text_endpoint_are_a_400(api, fake_connection, attributes, says):
    store = make_store(api, fake_connection)
    # Written by hand: the JSON may hold what a client's encoder refuses to write (1e999).
    response = api("editor").post(
        f"/admin/api/rag-stores/{store['id']}/documents/text",
        content=f'{{"title": "Policy", "content": "text", "attributes": {attributes}}}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    # The body's parser refuses an infinite number before the field is read.
    assert "attributes" in error["fields"] if says != "finite" else error["code"] == "invalid_json"


@pytest.fixture
def document(api, fake_connection):
    store = make_store(api, fake_connection)
    return upload(api("editor"), store, json.dumps({"customer": "acme"})).json()["documents"][0]


@pytest.mark.parametrize("persona", ["admin", "editor"])
def test_editors_and_admins_edit_attributes_and_tags_with_an_audit_row(api, document, persona):
    response = api(persona).patch(
        f"/admin/api/documents/{document['id']}", json={"attributes": {"customer": "globex"}, "tags": ["legal"]}
    )
    assert response.status_code == 200, response.text
    assert (response.json()["attributes"], response.json()["tags"]) == ({"customer": "globex"}, ["legal"])
    entry = AuditEntry.objects.filter(action="document.update").get()
    assert (entry.actor.username, entry.object_id) == (persona, document["id"])
    assert entry.before == {"attributes": {"customer": "acme"}, "tags": []}
    assert entry.after == {"attributes": {"customer": "globex"}, "tags": ["legal"]}


def test_a_patch_changes_only_what_it_names(api, document):
    response = api("editor").patch(f"/admin/api/documents/{document['id']}", json={"tags": ["hr"]})
    assert (response.json()["attributes"], response.json()["tags"]) == ({"customer": "acme"}, ["hr"])


@pytest.mark.parametrize(("persona", "status"), [("viewer", 403), ("outsider", 403), (None, 401)])
def test_others_cannot_edit_a_document(api, document, persona, status):
    response = api(persona).patch(f"/admin/api/documents/{document['id']}", json={"attributes": {}})
    assert response.status_code == status
    assert api("viewer").get(f"/admin/api/documents/{document['id']}").json()["attributes"] == {"customer": "acme"}


@pytest.mark.parametrize(
    "body",
    [
        {"attributes": "customer=acme"},
        {"attributes": {"a": {"b": 1}}},
        {"attributes": {"a\x00": 1}},
        {"tags": "hr"},
        {"tags": ["x" * 129]},
        {"tags": ["a\x00b"]},
        {"filename": "renamed.txt"},
        [],
    ],
)
def test_hostile_edits_are_a_400(api, document, body):
    response = api("editor").patch(f"/admin/api/documents/{document['id']}", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "validation_error"


def test_editing_a_missing_document_is_a_404(api, document):
    assert api("editor").patch("/admin/api/documents/999999", json={"attributes": {}}).status_code == 404
