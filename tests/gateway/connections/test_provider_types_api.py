"""`GET /admin/api/provider-types`: what the connection form offers, read by every role."""

from __future__ import annotations

import pytest

from gateway.connections.models import ProviderType

CHAT_ONLY = {"chat": True, "embeddings": False, "rerank": False, "tools": True, "images": True, "streaming_usage": True}
CHAT_AND_EMBEDDINGS = {**CHAT_ONLY, "embeddings": True}
EMBEDDINGS_ONLY = {key: key == "embeddings" for key in CHAT_ONLY}
RERANK_ONLY = {key: key == "rerank" for key in CHAT_ONLY}


def test_every_provider_type_is_listed_with_its_label_default_url_and_capabilities(api):
    response = api("admin").get("/admin/api/provider-types")
    assert response.status_code == 200
    listed = {item["type"]: item for item in response.json()}
    assert list(listed) == list(ProviderType.values)
    assert {name: item["capabilities"] for name, item in listed.items()} == {
        "openai": CHAT_AND_EMBEDDINGS,
        "custom_openai": CHAT_AND_EMBEDDINGS,
        "ollama": CHAT_AND_EMBEDDINGS,
        "gemini": CHAT_AND_EMBEDDINGS,
        "anthropic": CHAT_ONLY,
        "local": EMBEDDINGS_ONLY,
        "cohere_rerank": RERANK_ONLY,
        "voyage_rerank": RERANK_ONLY,
        "azure_openai": CHAT_AND_EMBEDDINGS,
    }
    assert listed["openai"] == {
        "type": "openai",
        "label": "OpenAI",
        "default_base_url": "https://api.openai.com/v1",
        "base_url_required": False,
        "capabilities": CHAT_AND_EMBEDDINGS,
        "fields": ["name", "provider_type", "base_url", "model_name", "dimensions", "api_key"],
        "presets": [],
    }
    assert listed["gemini"]["default_base_url"] == "https://generativelanguage.googleapis.com/v1beta"
    # A custom server and an Azure resource have no default: the connection must name its URL.
    for own in ("custom_openai", "azure_openai"):
        assert (listed[own]["default_base_url"], listed[own]["base_url_required"]) == ("", True)
    assert listed["cohere_rerank"]["default_base_url"] == "https://api.cohere.com"
    # Only Azure takes an api_version; the local embedder has no URL, key or width to set.
    assert [name for name, item in listed.items() if "api_version" in item["fields"]] == ["azure_openai"]
    assert listed["local"]["fields"] == ["name", "provider_type", "model_name", "dimensions"]
    assert "dimensions" not in listed["anthropic"]["fields"]
    assert all(item["label"] and item["label"] != item["type"] for item in listed.values())


@pytest.mark.parametrize("persona", ["editor", "viewer"])
def test_every_role_reads_the_provider_types(api, persona):
    response = api(persona).get("/admin/api/provider-types")
    assert response.status_code == 200
    assert response.json() == api("admin").get("/admin/api/provider-types").json()


def test_an_outsider_and_an_anonymous_caller_read_no_provider_types(api):
    outsider = api("outsider").get("/admin/api/provider-types")
    assert outsider.status_code == 403 and outsider.json()["error"]["code"] == "forbidden"
    assert api().get("/admin/api/provider-types").status_code == 401


@pytest.mark.parametrize("persona", ["admin", "editor", "viewer"])
def test_provider_types_cannot_be_written(api, persona):
    client = api(persona)
    attempts = [
        client.post("/admin/api/provider-types", json={"type": "openai"}),
        client.delete("/admin/api/provider-types"),
    ]
    assert [r.status_code for r in attempts] == [405, 405]
    assert all(r.json()["error"]["code"] == "method_not_allowed" for r in attempts)


def test_the_openai_compatible_presets_fill_in_their_services_base_url(api):
    listed = {item["type"]: item for item in api("viewer").get("/admin/api/provider-types").json()}
    presets = {preset["name"]: preset for preset in listed["custom_openai"]["presets"]}
    assert {name: preset["base_url"] for name, preset in presets.items()} == {
        "mistral": "https://api.mistral.ai/v1",
        "xai": "https://api.x.ai/v1",
        "groq": "https://api.groq.com/openai/v1",
        "deepseek": "https://api.deepseek.com/v1",
    }
    assert [name for name, preset in presets.items() if preset["embeddings"]] == ["mistral"]
    assert all(not item["presets"] for name, item in listed.items() if name != "custom_openai")


def test_every_presets_example_model_has_a_built_in_price():
    from gateway.connections.models import OPENAI_COMPATIBLE_PRESETS
    from gateway.connections.prices import BUILTIN_PRICES

    priced = [model for provider, model, *_ in BUILTIN_PRICES if provider == "custom_openai"]
    for preset in OPENAI_COMPATIBLE_PRESETS:
        assert any(
            preset.example_model == model or (model.endswith("*") and preset.example_model.startswith(model[:-1]))
            for model in priced
        ), preset.name
