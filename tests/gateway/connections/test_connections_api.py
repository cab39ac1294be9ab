import subprocess

import pytest

from gateway.connections.models import ModelConnection
from ragmux.core.models import AuditEntry
from ragmux.launch.embedded import pg_tool
from tests.factories import ProjectFactory, RouteFactory, RouteTargetFactory, StoreFactory
from tests.fakes.azure import AZURE_KEY

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
    response = admin.post(f"/admin/api/models/{created['id']}/test", json={"mode": "embedding"})
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
    assert "anthropic refused the credentials of this gateway's connection (HTTP 401)" in outcome["error"]
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


# Spellings of an IPv4 address some parsers read and others refuse or read otherwise; the probe's
# eleven, which crashed the image fetch, and their cousins.
NON_CANONICAL_HOSTS = [
    "0177.0.0.1",
    "127.0.0.01",
    "999.1.1.1",
    "256.1.1.1",
    "[::ffff:0177.0.0.1]",
    "0x7f.0.0.1",
    "2130706433",
    "127.1",
    "127.0.0.1.",
    "[fe80::1%25eth0]",
    "[1.2.3.4]",
]


@pytest.mark.parametrize("host", NON_CANONICAL_HOSTS)
def test_a_base_url_host_not_in_its_canonical_form_is_a_400(api, settings, host):
    settings.ALLOW_PRIVATE_UPSTREAMS = True  # refused for its spelling, not for where it leads
    body = {"name": "odd", "provider_type": "custom_openai", "base_url": f"http://{host}/v1", "model_name": "m"}

    response = api("admin").post("/admin/api/models", json=body)

    assert response.status_code == 400, response.text
    assert response.json()["error"]["fields"]["base_url"][0].startswith("base_url must be an http(s) URL")


def test_a_host_that_does_not_resolve_is_a_400_naming_it(api):
    host = "nonexistent.invalid"
    body = {"name": "nowhere", "provider_type": "custom_openai", "base_url": f"http://{host}/v1", "model_name": "m"}

    response = api("admin").post("/admin/api/models", json=body)

    assert response.status_code == 400
    assert response.json()["error"]["fields"]["base_url"][0].startswith(f"base_url host {host!r} cannot be used")


# --- a Test tries what the connection is used for (issue 31, point 1) ---------------------------


def _created(admin, body) -> int:
    response = admin.post("/admin/api/models", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _last_audited_test(connection_id: int) -> dict:
    return AuditEntry.objects.filter(action="connection.test", object_id=connection_id).first().after


def test_a_chat_only_server_a_project_chats_with_is_tested_with_chat(api, fake_upstream):
    admin = api("admin")
    # A chat-only OpenAI-compatible server: it has no embeddings endpoint.
    fake_upstream.configure("openai.embeddings", status=404)
    body = openai_body(fake_upstream, name="vllm", provider_type="custom_openai", model_name="llama-3-8b")
    connection_id = _created(admin, body)
    ProjectFactory(name="support", chat_connection_id=connection_id)

    outcome = admin.post(f"/admin/api/models/{connection_id}/test").json()

    assert (outcome["ok"], outcome["modes"], outcome["error"]) == (True, ["chat"], "")
    assert outcome["why"] == "Tried what it is used for: chat (chat of project “support”)"
    assert outcome["summary"].startswith(outcome["why"] + ". Chat answered “")
    assert fake_upstream.calls("openai.embeddings") == 0
    assert _last_audited_test(connection_id)["modes"] == ["chat"]
    stored = admin.get(f"/admin/api/models/{connection_id}").json()
    assert (stored["last_test_ok"], stored["last_test_modes"]) == (True, ["chat"])


def test_a_stores_embedding_connection_is_tested_with_embeddings_only(api, fake_upstream):
    admin = api("admin")
    connection_id = _created(admin, openai_body(fake_upstream))
    StoreFactory(name="kb", embedding_connection_id=connection_id)

    outcome = admin.post(f"/admin/api/models/{connection_id}/test").json()

    assert (outcome["ok"], outcome["modes"], outcome["dimensions"]) == (True, ["embedding"], 8)
    assert "embeddings (embeddings of store “kb”)" in outcome["why"]
    assert fake_upstream.calls("openai.chat") == 0
    assert _last_audited_test(connection_id)["modes"] == ["embedding"]


def test_a_connection_used_for_chat_and_embeddings_fails_when_either_does(api, fake_upstream):
    admin = api("admin")
    fake_upstream.configure("openai.embeddings", status=404)
    connection_id = _created(admin, openai_body(fake_upstream))
    ProjectFactory(name="support", chat_connection_id=connection_id)
    StoreFactory(name="kb", embedding_connection_id=connection_id)

    outcome = admin.post(f"/admin/api/models/{connection_id}/test").json()

    assert (outcome["ok"], outcome["modes"]) == (False, ["chat", "embedding"])
    assert [r["ok"] for r in outcome["results"]] == [True, False]
    assert outcome["error"].startswith("embeddings: openai answered HTTP 404")
    assert "; Embeddings failed after" not in outcome["summary"] and "; embeddings failed after" in outcome["summary"]


def test_a_stores_rerank_api_connection_is_tested_with_a_ranking(api, fake_upstream):
    admin = api("admin")
    body = openai_body(
        fake_upstream,
        name="cohere",
        provider_type="cohere_rerank",
        base_url=fake_upstream.url,
        model_name="rerank-v3.5",
    )
    connection_id = _created(admin, body)
    StoreFactory(name="kb", rerank=True, rerank_backend="cohere", rerank_connection_id=connection_id)

    outcome = admin.post(f"/admin/api/models/{connection_id}/test").json()

    assert (outcome["ok"], outcome["modes"], outcome["results"][0]["ranked"]) == (True, ["rerank"], 2)
    assert "rerank (reranking of store “kb”)" in outcome["why"]
    assert fake_upstream.calls("cohere.rerank") == 1
    assert _last_audited_test(connection_id)["modes"] == ["rerank"]


def test_a_chat_model_that_reranks_by_chat_is_tested_with_chat(api, fake_upstream):
    admin = api("admin")
    connection_id = _created(admin, openai_body(fake_upstream, model_name="gpt-4o-mini"))
    RouteTargetFactory(route=RouteFactory(name="reranker", kind="rerank"), connection_id=connection_id)

    outcome = admin.post(f"/admin/api/models/{connection_id}/test").json()

    assert (outcome["ok"], outcome["modes"]) == (True, ["chat"])
    assert "chat (rerank route “reranker”)" in outcome["why"]
    refused = admin.post(f"/admin/api/models/{connection_id}/test", json={"mode": "rerank"})
    assert refused.status_code == 400 and "has no rerank API" in refused.json()["error"]["message"]


def test_an_unused_connection_is_tested_for_all_its_type_can_do_and_passes_when_one_answers(api, fake_upstream):
    admin = api("admin")
    # An embedding model: the chat endpoint refuses it.
    fake_upstream.configure("openai.chat", status=404)
    connection_id = _created(admin, openai_body(fake_upstream))

    outcome = admin.post(f"/admin/api/models/{connection_id}/test").json()

    assert (outcome["ok"], outcome["modes"], outcome["dimensions"]) == (True, ["chat", "embedding"], 8)
    assert outcome["why"] == "Not used yet, so tried everything its type (OpenAI) can do: chat, embeddings"
    assert (
        "Chat failed after" in outcome["summary"]
        and "embeddings answered with vectors of 8 dimensions" in (outcome["summary"])
    )
    assert _last_audited_test(connection_id)["modes"] == ["chat", "embedding"]


# --- POST /admin/api/models/test: a connection tried before it is saved ---------------------------


def trial_body(fake_upstream, **overrides):
    body = {k: v for k, v in openai_body(fake_upstream).items() if k != "name"}
    return {**body, **overrides}


def test_an_unsaved_connection_is_tested_and_nothing_is_stored_or_echoed(api, fake_upstream):
    admin = api("admin")
    response = admin.post("/admin/api/models/test", json=trial_body(fake_upstream, mode="embedding"))
    assert response.status_code == 200, response.text
    outcome = response.json()
    assert (outcome["ok"], outcome["modes"], outcome["dimensions"]) == (True, ["embedding"], 8)
    assert SECRET not in response.text
    assert fake_upstream.requests_to("openai.embeddings")[-1].headers["authorization"] == f"Bearer {SECRET}"
    assert not ModelConnection.objects.exists()
    assert not AuditEntry.objects.filter(action="connection.test").exists()


def test_an_unsaved_azure_connection_is_tested_at_azures_paths(api, fake_upstream):
    body = {
        "provider_type": "azure_openai",
        "base_url": fake_upstream.url,
        "model_name": "chat-prod",
        "api_version": "2024-10-21",
        "api_key": AZURE_KEY,
        "mode": "chat",
    }
    outcome = api("admin").post("/admin/api/models/test", json=body).json()
    assert (outcome["ok"], outcome["modes"]) == (True, ["chat"]), outcome
    sent = fake_upstream.requests_to("azure.chat")[-1]
    assert sent.headers["api-key"] == AZURE_KEY


def test_an_unsaved_edit_reuses_the_stored_key_and_the_connections_uses(api, fake_upstream):
    admin = api("admin")
    connection_id = _created(admin, openai_body(fake_upstream))
    ProjectFactory(name="support", chat_connection_id=connection_id)
    body = trial_body(fake_upstream, api_key="", connection_id=connection_id, model_name="gpt-4o")

    outcome = admin.post("/admin/api/models/test", json=body).json()

    assert (outcome["ok"], outcome["modes"]) == (True, ["chat"])
    sent = fake_upstream.requests_to("openai.chat")[-1]
    assert sent.headers["authorization"] == f"Bearer {SECRET}" and sent.json()["model"] == "gpt-4o"
    assert admin.get(f"/admin/api/models/{connection_id}").json()["last_test_at"] is None


def test_an_unreachable_unsaved_connection_is_said_in_words(api, settings):
    from ragmux.launch.embedded import free_port

    port = free_port()
    body = {"provider_type": "custom_openai", "base_url": f"http://127.0.0.1:{port}/v1", "model_name": "m"}
    outcome = api("admin").post("/admin/api/models/test", json={**body, "mode": "chat"}).json()
    assert outcome["ok"] is False
    assert outcome["error"] == (
        f"Nothing is listening at http://127.0.0.1:{port} — check the base URL and that the server is running"
    )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"provider_type": "nope"}, "provider_type"),
        ({"base_url": "http://10.9.8.7/v1"}, "base_url"),
        ({"model_name": "../etc"}, "model_name"),
        ({"api_version": "2024-10-21"}, "api_version"),
        ({"mode": "rerank"}, "mode"),
        ({"connection_id": 999999}, "connection_id"),
        ({"name": "not a field here"}, "name"),
    ],
)
def test_an_unsaved_connection_is_checked_as_a_save_would_be(api, fake_upstream, settings, overrides, field):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["127.0.0.1"]
    response = api("admin").post("/admin/api/models/test", json=trial_body(fake_upstream, **overrides))
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["fields"]
    assert fake_upstream.calls() == 0


@pytest.mark.parametrize(("persona", "status"), [("editor", 403), ("viewer", 403), ("outsider", 403), (None, 401)])
def test_only_admins_test_unsaved_connections(api, fake_upstream, persona, status):
    response = api(persona).post("/admin/api/models/test", json=trial_body(fake_upstream))
    assert response.status_code == status
    assert fake_upstream.calls() == 0


@pytest.mark.parametrize("persona", ["admin", "editor", "viewer"])
def test_testing_an_unsaved_connection_takes_only_a_post(api, persona):
    client = api(persona)
    answers = [client.get("/admin/api/models/test")]
    if persona == "admin":  # the others may write nothing here, whatever the method (403 above)
        answers += [client.put("/admin/api/models/test", json={}), client.delete("/admin/api/models/test")]
    assert {a.status_code for a in answers} == {405}
    assert all(a.json()["error"]["code"] == "method_not_allowed" for a in answers)
