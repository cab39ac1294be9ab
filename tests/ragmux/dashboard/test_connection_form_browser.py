"""The connection form in a browser: it shows the fields each provider type takes (from the
provider types the API lists), a preset fills in its service's base URL, "Test before saving"
tries the typed connection and says the outcome in words, and a saved connection's Test says
what it tried and why."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ProjectFactory
from tests.helpers import sign_in

pytestmark = pytest.mark.browser

KEY = "sk-typed-never-echoed-98765"
# The fields the script shows or hides, by their labels.
TYPED_FIELDS = ("Base URL", "Dimensions", "API version", "API key")


def shown_fields(page) -> list[str]:
    return [label for label in TYPED_FIELDS if page.get_by_label(label, exact=True).is_visible()]


def test_the_form_shows_only_the_fields_each_type_takes_and_presets_fill_the_base_url(wide_page, personas, shots):
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/connections/new")
    provider = page.get_by_label("Provider")
    service = page.get_by_label("Service")

    expect(page.get_by_label("API version")).to_be_hidden()
    expect(service).to_be_hidden()
    assert shown_fields(page) == ["Base URL", "Dimensions", "API key"]

    provider.select_option("azure_openai")
    expect(page.get_by_label("API version")).to_be_visible()
    assert shown_fields(page) == list(TYPED_FIELDS)

    provider.select_option("anthropic")
    assert shown_fields(page) == ["Base URL", "API key"]

    provider.select_option("local")
    assert shown_fields(page) == ["Dimensions"]

    provider.select_option("custom_openai")
    expect(service).to_be_visible()
    service.select_option(label="DeepSeek (https://api.deepseek.com/v1)")
    expect(page.get_by_label("Base URL")).to_have_value("https://api.deepseek.com/v1")
    expect(page.get_by_label("Model")).to_have_attribute("placeholder", "deepseek-chat")
    service.select_option(label="Groq (https://api.groq.com/openai/v1)")
    expect(page.get_by_label("Base URL")).to_have_value("https://api.groq.com/openai/v1")
    shots(page, "connection-form")


def test_test_before_saving_tries_the_typed_connection_and_says_the_outcome_in_words(
    wide_page, personas, fake_upstream, shots
):
    from gateway.connections.models import ModelConnection
    from ragmux.launch.embedded import free_port

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/connections/new")
    page.get_by_label("Name").fill("gpu-box")
    page.get_by_label("Provider").select_option("custom_openai")
    page.get_by_label("Base URL").fill(f"{fake_upstream.url}/v1")
    page.get_by_label("Model").fill("llama-3-8b")
    page.get_by_label("API key").fill(KEY)

    page.get_by_role("button", name="Test before saving").click()
    result = page.get_by_role("status")
    expect(result).to_have_text(
        re.compile(
            r"Works: Not used yet, so tried everything its type \(OpenAI-compatible server\) can do: chat, "
            r"embeddings\. Chat answered “The” in \d+ ms; "  # the probe asks for one token, and the fake keeps to it
            r"embeddings answered with vectors of 8 dimensions in \d+ ms\."
        )
    )
    assert fake_upstream.requests_to("openai.chat")[-1].headers["authorization"] == f"Bearer {KEY}"

    port = free_port()
    page.get_by_label("Base URL").fill(f"http://127.0.0.1:{port}/v1")
    page.get_by_role("button", name="Test before saving").click()
    expect(result).to_contain_text(
        f"Nothing is listening at http://127.0.0.1:{port} — check the base URL and that the server is running"
    )
    expect(result).to_have_text(re.compile(r"^Failed: "))
    shots(page, "connection-test-before-saving")

    page.get_by_label("Provider").select_option("azure_openai")
    page.get_by_label("API version").fill("last week")
    page.get_by_role("button", name="Test before saving").click()
    expect(result).to_have_text(re.compile(r"^Not tested: api_version must be a dated Azure API version"))

    assert KEY not in page.content()
    assert not ModelConnection.objects.exists()


def test_a_saved_connections_test_says_what_it_tried_and_why(wide_page, personas, fake_upstream, chat_connection):
    ProjectFactory(name="support", chat_connection=chat_connection)
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/connections/")
    page.get_by_role("button", name="Test fake-chat").click()
    expect(page.locator(".flash p").first).to_have_text(
        re.compile(
            r"“fake-chat” works\. Tried what it is used for: chat \(chat of project “support”\)\. "
            r"Chat answered “.+” in \d+ ms\."
        )
    )
    expect(page.locator("tr[data-connection=fake-chat] .last-test")).to_contain_text("ok chat in")
    assert fake_upstream.calls("openai.embeddings") == 0


def test_a_loopback_model_server_is_reachable_on_one_machine_and_a_refusal_names_its_setting(
    wide_page, personas, fake_upstream, fake_connection, settings, shots
):
    """With the guard on (the compose default), the list does not call a refused row "allowed"
    and its Test names the setting, where it is set and that a restart applies it. With loopback
    allowed (the embedded default), a model server at localhost is added and answers."""
    from gateway.connections.models import ModelConnection

    settings.PRIVATE_UPSTREAM_ALLOWLIST = []
    settings.ALLOW_LOOPBACK_UPSTREAMS = False
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/connections/")
    row = page.locator("tr[data-connection=fake-openai]")
    expect(row).not_to_contain_text("allowed by the settings")
    expect(row).to_contain_text("refused: upstream host")
    page.get_by_role("button", name="Test fake-openai").click()
    flash = page.locator(".flash p").first
    expect(flash).to_contain_text("ALLOW_LOOPBACK_UPSTREAMS=true")
    expect(flash).to_contain_text("deploy/.env under Docker Compose")
    expect(flash).to_contain_text("restart ragmux to apply it")
    shots(page, "connections-refused")

    settings.ALLOW_LOOPBACK_UPSTREAMS = True
    port = fake_upstream.url.rsplit(":", 1)[1]
    page.goto("/admin/connections/new")
    page.get_by_label("Name").fill("ollama-here")
    page.get_by_label("Provider").select_option("custom_openai")
    page.get_by_label("Base URL").fill(f"http://localhost:{port}/v1")
    page.get_by_label("Model").fill("llama-3-8b")
    page.get_by_role("button", name="Create the connection").click()
    expect(page.locator(".flash p").first).to_contain_text("Created the connection “ollama-here”")
    expect(page.locator("tr[data-connection=ollama-here]")).to_contain_text("private address, allowed by the settings")
    page.get_by_role("button", name="Test ollama-here").click()
    expect(page.locator(".flash p").first).to_contain_text("“ollama-here” works")
    assert ModelConnection.objects.get(name="ollama-here").private_upstream
