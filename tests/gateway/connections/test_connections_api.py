import subprocess

import pytest

from gateway.connections.models import ModelConnection
from ragmux.launch.embedded import pg_tool
from tests.factories import StoreFactory

SECRET = "sk-test-PLAINTEXT-0123456789abcdef"


def openai_body(fake_upstream, **overrides):
    body = {
        "name": "embedder",
        "provider_type": "openai",
        "base_url": f"{fake_upstream.url}/v1",
        "model_name": "text-embedding-3-small",
        "api_key": SECRET,
    }
    body.update(overrides)
    return body


def anthropic_body(fake_upstream):
    return openai_body(
        fake_upstream,
        name="claude",
        provider_type="anthropic",
        base_url=fake_upstream.url,
        model_name="claude-sonnet-4-5",
    )


def test_admin_creates_a_connection_and_the_key_is_only_ever_masked(api, fake_upstream):
    admin = api("admin")
    created = admin.post("/admin/api/models", json=openai_body(fake_upstream))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["api_key_masked"] == "sk-…cdef"
    assert SECRET not in created.text
    assert body["private_upstream"] is True
    listed = admin.get("/admin/api/models")
    assert SECRET not in listed.text
    assert [c["name"] for c in listed.json()] == ["embedder"]
    fetched = admin.get(f"/admin/api/models/{body['id']}")
    assert SECRET not in fetched.text
    assert fetched.json()["api_key_masked"] == "sk-…cdef"


def test_pg_dump_holds_no_plaintext_key(api, fake_upstream, subprocess_env, transactional_db):
    """pg_dump reads from its own session: the row must be committed (`transactional_db`)."""
    api("admin").post("/admin/api/models", json=openai_body(fake_upstream))
    dump = subprocess.run(
        [pg_tool("pg_dump"), "--data-only", subprocess_env["DATABASE_URL"].replace("postgres://", "postgresql://")],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert b"embedder" in dump  # the row is in the dump...
    assert SECRET.encode() not in dump  # ...but its key is not
    assert SECRET[-12:].encode() not in dump


def test_updating_with_an_empty_key_keeps_the_stored_key(api, fake_upstream):
    admin = api("admin")
    created = admin.post("/admin/api/models", json=openai_body(fake_upstream)).json()
    updated = admin.put(
        f"/admin/api/models/{created['id']}", json=openai_body(fake_upstream, name="renamed", api_key="")
    )
    assert updated.status_code == 200
    assert updated.json()["name"] == "renamed"
    assert updated.json()["api_key_masked"] == "sk-…cdef"
    admin.post(f"/admin/api/models/{created['id']}/test")
    sent = fake_upstream.requests_to("openai.embeddings")[-1]
    assert sent.headers["authorization"] == f"Bearer {SECRET}"


def test_updating_with_a_new_key_replaces_it(api, fake_upstream):
    admin = api("admin")
    created = admin.post("/admin/api/models", json=openai_body(fake_upstream)).json()
    admin.put(
        f"/admin/api/models/{created['id']}", json=openai_body(fake_upstream, api_key="sk-other-key-000011112222")
    )
    admin.post(f"/admin/api/models/{created['id']}/test")
    assert (
        fake_upstream.requests_to("openai.embeddings")[-1].headers["authorization"]
        == "Bearer sk-other-key-000011112222"
    )


def test_probe_reports_width_and_latency_and_records_them(api, fake_upstream):
    admin = api("admin")
    fake_upstream.configure("openai.embeddings", width=12)
    created = admin.post("/admin/api/models", json=openai_body(fake_upstream)).json()
    outcome = admin.post(f"/admin/api/models/{created['id']}/test").json()
    assert outcome["ok"] is True
    assert outcome["dimensions"] == 12
    assert outcome["latency_ms"] >= 0
    stored = admin.get(f"/admin/api/models/{created['id']}").json()
    assert stored["last_test_ok"] is True
    assert stored["last_test_dimensions"] == 12
    assert stored["last_test_at"] is not None


def test_a_failing_probe_is_reported_and_recorded_not_raised(api, fake_upstream):
    admin = api("admin")
    fake_upstream.configure("openai.embeddings", status=401)
    created = admin.post("/admin/api/models", json=openai_body(fake_upstream)).json()
    response = admin.post(f"/admin/api/models/{created['id']}/test")
    assert response.status_code == 200
    outcome = response.json()
    assert outcome["ok"] is False
    assert "HTTP 401" in outcome["error"]
    assert SECRET not in response.text
    assert admin.get(f"/admin/api/models/{created['id']}").json()["last_test_ok"] is False


def test_a_chat_only_connection_gets_a_one_token_chat_probe(api, fake_upstream):
    admin = api("admin")
    created = admin.post(
        "/admin/api/models",
        json=anthropic_body(fake_upstream),
    ).json()
    outcome = admin.post(f"/admin/api/models/{created['id']}/test").json()
    assert (outcome["ok"], outcome["mode"], outcome["dimensions"]) == (True, "chat", None)
    assert outcome["reply"] == "The"  # one word a token, in the fake
    sent = fake_upstream.requests_to("anthropic.messages")[-1]
    assert sent.json()["max_tokens"] == 1 and sent.headers["x-api-key"] == SECRET
    assert admin.get(f"/admin/api/models/{created['id']}").json()["last_test_ok"] is True
    refused = admin.post(f"/admin/api/models/{created['id']}/test", json={"mode": "embedding"})
    assert refused.status_code == 400
    assert 'connection "claude" cannot embed' in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("provider_type", "path", "route", "limit"),
    [
        ("openai", "/v1", "openai.chat", ("max_completion_tokens", 1)),
        ("gemini", "/v1beta", "gemini.generate", ("generationConfig", {"maxOutputTokens": 1})),
        ("ollama", "", "ollama.chat", ("options", {"num_predict": 1})),
    ],
)
def test_a_connection_that_can_embed_is_probed_with_chat_when_asked(
    api, fake_upstream, provider_type, path, route, limit
):
    admin = api("admin")
    created = admin.post(
        "/admin/api/models",
        json=openai_body(fake_upstream, provider_type=provider_type, base_url=f"{fake_upstream.url}{path}"),
    ).json()
    outcome = admin.post(f"/admin/api/models/{created['id']}/test", json={"mode": "chat"}).json()
    assert (outcome["ok"], outcome["mode"]) == (True, "chat")
    assert outcome["reply"]
    name, value = limit
    assert fake_upstream.requests_to(route)[-1].json()[name] == value
    assert fake_upstream.calls("openai.embeddings") == 0


def test_a_failing_chat_probe_is_reported_redacted_and_recorded(api, fake_upstream):
    admin = api("admin")
    fake_upstream.configure("anthropic.messages", status=401)
    created = admin.post(
        "/admin/api/models",
        json=anthropic_body(fake_upstream),
    ).json()
    outcome = admin.post(f"/admin/api/models/{created['id']}/test").json()
    assert outcome["ok"] is False
    assert "anthropic answered HTTP 401" in outcome["error"]
    stored = admin.get(f"/admin/api/models/{created['id']}").json()
    assert stored["last_test_ok"] is False and "HTTP 401" in stored["last_test_error"]


def test_duplicate_names_conflict(api, fake_upstream):
    admin = api("admin")
    admin.post("/admin/api/models", json=openai_body(fake_upstream))
    response = admin.post("/admin/api/models", json=openai_body(fake_upstream))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "duplicate_name"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"provider_type": "mystery"}, "provider_type", "provider_type"),
        ({"model_name": "../etc"}, "model_name", "model_name must be"),
        ({"provider_type": "custom_openai", "base_url": ""}, "base_url", "base_url is required for custom_openai"),
        ({"base_url": "ftp://example.com"}, "base_url", "base_url must be an http(s) URL"),
        ({"base_url": "https://user:pw@example.com/v1"}, "base_url", "must not carry credentials"),
        ({"base_url": "https://example.com/v1?x=1"}, "base_url", "must not have a query"),
        ({"dimensions": 0}, "dimensions", "dimensions must be between 1 and 16000"),
    ],
)
def test_invalid_connections_are_400_with_the_field_named(api, fake_upstream, overrides, field, message):
    response = api("admin").post("/admin/api/models", json=openai_body(fake_upstream, **overrides))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["fields"]
    assert message in error["message"]


def test_deleting_a_connection_a_store_uses_is_a_409(api, fake_upstream):
    admin = api("admin")
    created = admin.post("/admin/api/models", json=openai_body(fake_upstream)).json()
    StoreFactory(name="handbook", embedding_connection=ModelConnection.objects.get(pk=created["id"]))
    response = admin.delete(f"/admin/api/models/{created['id']}")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "connection_in_use"
    assert "'handbook'" in response.json()["error"]["message"]


def test_deleting_an_unused_connection(api, fake_upstream):
    admin = api("admin")
    created = admin.post("/admin/api/models", json=openai_body(fake_upstream)).json()
    assert admin.delete(f"/admin/api/models/{created['id']}").json() == {"ok": True}
    assert admin.get(f"/admin/api/models/{created['id']}").status_code == 404


@pytest.mark.parametrize("persona", ["editor", "viewer", "outsider"])
def test_only_admins_write_connections(api, fake_upstream, persona):
    existing = api("admin").post("/admin/api/models", json=openai_body(fake_upstream)).json()
    client = api(persona)
    attempts = [
        client.post("/admin/api/models", json=openai_body(fake_upstream, name="other")),
        client.put(f"/admin/api/models/{existing['id']}", json=openai_body(fake_upstream)),
        client.delete(f"/admin/api/models/{existing['id']}"),
        client.post(f"/admin/api/models/{existing['id']}/test"),
    ]
    assert [r.status_code for r in attempts] == [403, 403, 403, 403]
    assert all(r.json()["error"]["code"] == "forbidden" for r in attempts)
    assert fake_upstream.calls() == 0


@pytest.mark.parametrize("persona", ["editor", "viewer"])
def test_every_role_reads_connections(api, fake_upstream, persona):
    api("admin").post("/admin/api/models", json=openai_body(fake_upstream))
    response = api(persona).get("/admin/api/models")
    assert response.status_code == 200
    assert len(response.json()) == 1


def test_no_credentials_writes_are_401(api, fake_upstream):
    response = api().post("/admin/api/models", json=openai_body(fake_upstream))
    assert response.status_code == 401


def test_an_ollama_connection_without_a_base_url_is_checked_at_its_default(api, settings):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = []
    body = {"name": "local-ollama", "provider_type": "ollama", "base_url": "", "model_name": "nomic-embed-text"}

    refused = api("admin").post("/admin/api/models", json=body)

    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "private_upstream"
    assert "http://localhost:11434" in error["message"] and "PRIVATE_UPSTREAM_ALLOWLIST" in error["message"]
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["localhost"]
    assert api("admin").post("/admin/api/models", json=body).status_code == 201


@pytest.mark.parametrize("host", ["nonexistent.invalid", "256.1.1.1"])
def test_a_host_that_does_not_resolve_is_a_400_naming_it(api, host):
    body = {"name": "nowhere", "provider_type": "custom_openai", "base_url": f"http://{host}/v1", "model_name": "m"}

    response = api("admin").post("/admin/api/models", json=body)

    assert response.status_code == 400
    assert response.json()["error"]["fields"]["base_url"][0].startswith(f"base_url host {host!r} cannot be used")
