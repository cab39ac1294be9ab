"""Projects and gateway keys in the admin API: admins write, every role reads."""

from __future__ import annotations

import hashlib

import pytest

from tests.fixtures import PERSONAS


@pytest.fixture
def project_body(chat_connection, fake_connection, falcon_store):
    return {
        "name": "support",
        "chat_connection_id": chat_connection.id,
        "embedding_connection_id": fake_connection.id,
        "store_id": falcon_store.id,
        "system_prompt": "Be kind.",
    }


def test_admin_creates_reads_updates_and_deletes_a_project(api, project_body, chat_connection):
    admin = api("admin")
    created = admin.post("/admin/api/projects", json=project_body)
    assert created.status_code == 201, created.text
    body = created.json()
    assert {k: body[k] for k in project_body} == project_body
    assert api("viewer").get(f"/admin/api/projects/{body['id']}").json()["name"] == "support"
    assert [p["name"] for p in api("viewer").get("/admin/api/projects").json()] == ["support"]
    updated = admin.put(
        f"/admin/api/projects/{body['id']}",
        json={"name": "renamed", "chat_connection_id": chat_connection.id, "store_id": None},
    )
    assert updated.status_code == 200
    assert (updated.json()["store_id"], updated.json()["system_prompt"]) == (None, "")
    assert admin.delete(f"/admin/api/projects/{body['id']}").json() == {"ok": True}
    assert admin.get(f"/admin/api/projects/{body['id']}").status_code == 404


def test_project_validation(api, project_body, fake_connection):
    admin = api("admin")
    assert admin.post("/admin/api/projects", json=project_body).status_code == 201
    assert admin.post("/admin/api/projects", json=project_body).json()["error"]["code"] == "duplicate_name"
    wrong_kind = admin.post("/admin/api/projects", json={**project_body, "name": "x", "chat_connection_id": 0})
    assert wrong_kind.status_code == 400
    assert "chat_connection_id" in wrong_kind.json()["error"]["fields"]
    missing_store = admin.post("/admin/api/projects", json={**project_body, "name": "y", "store_id": 999999})
    assert missing_store.json()["error"]["fields"] == {
        "store_id": ["store_id does not reference an existing RAG store"]
    }


@pytest.mark.parametrize("persona", ["editor", "viewer", "outsider"])
def test_only_admins_write_projects_and_keys(api, project, persona):
    client = api(persona)
    expected = 403
    assert client.post("/admin/api/projects", json={"name": "x", "chat_connection_id": 1}).status_code == expected
    assert client.put(f"/admin/api/projects/{project.id}", json={}).status_code == expected
    assert client.delete(f"/admin/api/projects/{project.id}").status_code == expected
    assert client.post(f"/admin/api/projects/{project.id}/keys", json={"name": "k"}).status_code == expected
    if persona == "outsider":
        assert client.get("/admin/api/projects").status_code == 403
    else:
        assert client.get("/admin/api/projects").status_code == 200
        assert client.get(f"/admin/api/projects/{project.id}/keys").status_code == 200


@pytest.mark.parametrize("persona", PERSONAS)
def test_unknown_ids_and_methods(api, persona):
    client = api(persona)
    expected_404 = 403 if persona == "outsider" else 404
    assert client.get("/admin/api/projects/999999").status_code == expected_404
    assert client.get("/admin/api/projects/999999/keys").status_code == expected_404
    if persona == "admin":
        assert client.post("/admin/api/keys/999999/rotate").status_code == 404
        assert client.delete("/admin/api/keys/999999").status_code == 404
    assert client.patch("/admin/api/projects/999999", json={}).status_code in (403, 405)
    assert client.get("/admin/api/keys/999999/rotate").status_code in (403, 405)
    assert api().get("/admin/api/projects").status_code == 401


def test_a_key_is_shown_once_and_stored_hashed(api, project):
    from gateway.clients.models import GatewayKey

    admin = api("admin")
    created = admin.post(f"/admin/api/projects/{project.id}/keys", json={"name": "ci"})
    assert created.status_code == 201
    body = created.json()
    key = body["key"]
    assert key.startswith("sk-proj-") and len(key) == 51
    assert set(body["api_key"]) == {"id", "name", "prefix", "scopes", "created_at", "last_used_at", "expires_at"}
    assert body["api_key"]["prefix"] == key[:15]
    assert body["api_key"]["scopes"] == ["chat", "retrieve", "rerank", "models"]
    row = GatewayKey.objects.get(pk=body["api_key"]["id"])
    assert row.key_hash == hashlib.sha256(key.encode()).hexdigest()
    listed = admin.get(f"/admin/api/projects/{project.id}/keys")
    assert key not in listed.text
    assert [k["name"] for k in listed.json()] == ["ci"]
    scoped = admin.post(f"/admin/api/projects/{project.id}/keys", json={"name": "r", "scopes": ["retrieve"]})
    assert scoped.json()["api_key"]["scopes"] == ["retrieve"]
    bad = admin.post(f"/admin/api/projects/{project.id}/keys", json={"name": "r", "scopes": ["admin"]})
    assert bad.status_code == 400


def test_revoked_keys_leave_the_list(api, project, project_key):
    from gateway.clients.models import GatewayKey

    admin = api("admin")
    key_id = GatewayKey.objects.get(prefix=project_key[:15]).pk
    assert admin.delete(f"/admin/api/keys/{key_id}").json() == {"ok": True}
    assert admin.get(f"/admin/api/projects/{project.id}/keys").json() == []
    assert admin.post(f"/admin/api/keys/{key_id}/rotate").status_code == 404


def test_a_connection_used_by_a_project_cannot_be_deleted(api, project, chat_connection):
    response = api("admin").delete(f"/admin/api/models/{chat_connection.id}")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "connection_in_use"
    assert "falcon-bot" in response.json()["error"]["message"]


def test_deleting_a_store_unlinks_its_projects(api, project, falcon_store):
    assert api("admin").delete(f"/admin/api/rag-stores/{falcon_store.id}").status_code == 200
    assert api("viewer").get(f"/admin/api/projects/{project.id}").json()["store_id"] is None
