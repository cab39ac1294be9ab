"""Projects and gateway keys in the admin API: admins write, every role reads."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tests.fixtures import PERSONAS

LIMITS = (
    "rate_limit_rpm",
    "rate_limit_tpm",
    "budget_daily_tokens",
    "budget_monthly_tokens",
    "budget_daily_usd",
    "budget_monthly_usd",
)


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
def test_only_admins_write_projects_and_keys(api, project, project_key, persona):
    from gateway.clients.models import GatewayKey

    key_id = GatewayKey.objects.get(prefix=project_key[:15]).pk
    client = api(persona)
    expected = 403
    assert client.post("/admin/api/projects", json={"name": "x", "chat_connection_id": 1}).status_code == expected
    assert client.put(f"/admin/api/projects/{project.id}", json={}).status_code == expected
    assert client.patch(f"/admin/api/projects/{project.id}", json={"rate_limit_rpm": 1}).status_code == expected
    assert client.delete(f"/admin/api/projects/{project.id}").status_code == expected
    assert client.post(f"/admin/api/projects/{project.id}/keys", json={"name": "k"}).status_code == expected
    assert client.patch(f"/admin/api/keys/{key_id}", json={"rate_limit_rpm": 1}).status_code == expected
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
    # Writes are refused before the lookup to all but admins.
    expected_write = 404 if persona == "admin" else 403
    assert client.patch("/admin/api/projects/999999", json={}).status_code == expected_write
    assert client.patch("/admin/api/keys/999999", json={}).status_code == expected_write
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
    assert set(body["api_key"]) == {
        "id",
        "name",
        "prefix",
        "scopes",
        "filters",
        *LIMITS,
        "created_at",
        "last_used_at",
        "expires_at",
    }
    assert {name: body["api_key"][name] for name in LIMITS} == dict.fromkeys(LIMITS, 0)
    assert body["api_key"]["filters"] is None  # no document scope unless one is given
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


def _limits(body: dict) -> dict:
    return {name: body[name] for name in LIMITS}


def test_a_full_update_keeps_the_limits_it_omits_and_a_partial_one_changes_only_what_it_names(
    api, project_body, chat_connection
):
    admin = api("admin")
    limits = {
        "rate_limit_rpm": 60,
        "rate_limit_tpm": 90_000,
        "budget_daily_tokens": 1_000_000,
        "budget_monthly_tokens": 20_000_000,
        "budget_daily_usd": "2.5",
        "budget_monthly_usd": 40.125001,
    }
    created = admin.post("/admin/api/projects", json={**project_body, **limits}).json()
    stored = {**limits, "budget_daily_usd": 2.5}
    assert _limits(created) == stored
    put = admin.put(
        f"/admin/api/projects/{created['id']}", json={"name": "renamed", "chat_connection_id": chat_connection.id}
    )
    assert put.status_code == 200, put.text
    assert put.json()["name"] == "renamed" and _limits(put.json()) == stored
    patched = admin.patch(
        f"/admin/api/projects/{created['id']}", json={"rate_limit_rpm": 0, "budget_daily_usd": 0.000001}
    )
    assert patched.status_code == 200, patched.text
    assert _limits(patched.json()) == {**stored, "rate_limit_rpm": 0, "budget_daily_usd": 0.000001}
    assert (patched.json()["name"], patched.json()["store_id"]) == ("renamed", None)

    from gateway.clients.models import Project

    row = Project.objects.get(pk=created["id"])
    assert (row.budget_daily_usd_micros, row.budget_monthly_usd_micros) == (1, 40_125_001)


def test_every_limit_change_is_audited(api, project, project_key):
    from gateway.clients.models import GatewayKey
    from ragmux.core.models import AuditEntry

    admin = api("admin")
    assert admin.patch(f"/admin/api/projects/{project.id}", json={"budget_daily_tokens": 5000}).status_code == 200
    entry = AuditEntry.objects.get(action="project.update", object_id=project.id)
    assert (entry.actor_username, entry.before, entry.after) == (
        "admin",
        {"budget_daily_tokens": 0},
        {"budget_daily_tokens": 5000},
    )
    key_id = GatewayKey.objects.get(prefix=project_key[:15]).pk
    assert admin.patch(f"/admin/api/keys/{key_id}", json={"budget_monthly_usd": "12.34"}).status_code == 200
    entry = AuditEntry.objects.get(action="key.update", object_id=key_id)
    assert (entry.before, entry.after) == ({"budget_monthly_usd_micros": 0}, {"budget_monthly_usd_micros": 12_340_000})


@pytest.mark.parametrize("persona", PERSONAS)
def test_query_rewrite_is_off_unless_set_refuses_other_values_and_its_change_is_audited(api, project_body, persona):
    from ragmux.core.models import AuditEntry

    admin = api("admin")
    created = admin.post("/admin/api/projects", json=project_body).json()
    assert created["query_rewrite"] == "off"
    url = f"/admin/api/projects/{created['id']}"
    for wrong in ("LLM", "", None, 1, ["llm"], "llm\u0000"):
        refused = admin.patch(url, json={"query_rewrite": wrong})
        assert refused.status_code == 400 and "query_rewrite" in refused.json()["error"]["fields"], wrong
    if persona != "admin":
        assert api(persona).patch(url, json={"query_rewrite": "llm"}).status_code in (401, 403)
        return
    assert admin.patch(url, json={"query_rewrite": "last_turns"}).json()["query_rewrite"] == "last_turns"
    assert api("viewer").get(url).json()["query_rewrite"] == "last_turns"
    entry = AuditEntry.objects.get(action="project.update", object_id=created["id"])
    assert (entry.before, entry.after) == ({"query_rewrite": "off"}, {"query_rewrite": "last_turns"})


def test_a_key_patch_edits_its_name_scopes_expiry_and_limits_and_keeps_the_rest(api, project, project_key, v1):
    from gateway.clients.models import GatewayKey

    admin = api("admin")
    key_id = GatewayKey.objects.get(prefix=project_key[:15]).pk
    expiry = "2099-01-01T00:00:00Z"
    edited = admin.patch(
        f"/admin/api/keys/{key_id}",
        json={"name": "ci", "scopes": ["models"], "expires_at": expiry, "rate_limit_tpm": 500, "budget_daily_usd": 3},
    )
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert (body["name"], body["scopes"], body["expires_at"]) == ("ci", ["models"], expiry)
    assert _limits(body) == {**dict.fromkeys(LIMITS, 0), "rate_limit_tpm": 500, "budget_daily_usd": 3.0}
    again = admin.patch(f"/admin/api/keys/{key_id}", json={"expires_at": None, "rate_limit_rpm": 7}).json()
    assert (again["name"], again["scopes"], again["expires_at"]) == ("ci", ["models"], None)
    assert (again["rate_limit_rpm"], again["rate_limit_tpm"], again["budget_daily_usd"]) == (7, 500, 3.0)
    # The secret is unchanged: the key still answers.
    assert v1(project_key).get("/models").status_code == 200
    refused = admin.patch(f"/admin/api/keys/{key_id}", json={"name": " ", "expires_at": "2001-01-01T00:00:00Z"})
    assert refused.status_code == 400
    assert admin.delete(f"/admin/api/keys/{key_id}").status_code == 200
    assert admin.patch(f"/admin/api/keys/{key_id}", json={"name": "x"}).status_code == 404


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate_limit_rpm", -1),
        ("rate_limit_rpm", 1.5),
        ("rate_limit_rpm", "ten"),
        ("rate_limit_rpm", None),
        # Past the `integer` column.
        ("rate_limit_tpm", 2**31),
        # Past the `bigint` column.
        ("budget_daily_tokens", 2**63),
        ("budget_monthly_tokens", 10**400),
        ("budget_monthly_tokens", 1e300),
        ("budget_daily_usd", -0.01),
        ("budget_daily_usd", "0.0000001"),
        ("budget_daily_usd", "NaN"),
        ("budget_daily_usd", 1e30),
        # One micro-dollar past the `bigint` column.
        ("budget_monthly_usd", "9223372036854.775808"),
        ("budget_monthly_usd", "9223372036855"),
    ],
)
def test_limits_are_whole_non_negative_and_fit_their_columns(api, project, project_key, field, value):
    from gateway.clients.models import GatewayKey

    admin = api("admin")
    key_id = GatewayKey.objects.get(prefix=project_key[:15]).pk
    for url in (f"/admin/api/projects/{project.id}", f"/admin/api/keys/{key_id}"):
        response = admin.patch(
            url, content=f'{{"{field}": {_json_number(value)}}}', headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, (url, response.text)
        assert field in response.json()["error"]["fields"]


def _json_number(value) -> str:
    """``value`` as JSON text, big integers and floats written out as a client would."""
    import json

    return str(value) if isinstance(value, int) and not isinstance(value, bool) else json.dumps(value)


def test_the_largest_limits_the_columns_hold_are_accepted(api, project):
    from gateway.clients.models import Project

    body = {
        "rate_limit_tpm": 2**31 - 1,
        "budget_monthly_tokens": 2**63 - 1,
        "budget_monthly_usd": "9223372036854.775807",
    }
    response = api("admin").patch(f"/admin/api/projects/{project.id}", json=body)
    assert response.status_code == 200, response.text
    row = Project.objects.get(pk=project.id)
    assert (row.rate_limit_tpm, row.budget_monthly_tokens, row.budget_monthly_usd_micros) == (
        2**31 - 1,
        2**63 - 1,
        2**63 - 1,
    )


def test_a_body_without_its_json_content_type_is_a_415_naming_the_header(api, project_body):
    # What curl's -d sends without -H "Content-Type: application/json".
    response = api("admin").post(
        "/admin/api/projects",
        content=json.dumps(project_body),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    error = response.json()["error"]
    assert error["code"] == "unsupported_media_type"
    assert error["message"].endswith('Send the JSON body with the header "Content-Type: application/json".')


def test_every_curl_example_that_sends_a_body_says_it_is_json():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for doc in (root / "README.md", *sorted((root / "docs").glob("*.md"))):
        # A command runs from `curl` to the first line that does not end in a backslash.
        for command in re.findall(r"^curl (?:.*\\\n)*.*$", doc.read_text(), flags=re.MULTILINE):
            if " -d " in command:
                assert '-H "Content-Type: application/json"' in command, f"{doc.name}: {command}"
