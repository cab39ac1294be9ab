"""The new-store form as an admin with one embedding connection meets it: that connection is
chosen already, so a store created with every default is created."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import sign_in

pytestmark = pytest.mark.browser


def test_the_only_embedding_connection_is_preselected(wide_page, personas, fake_connection, shots):
    from stores.models import RagStore

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/stores/new")
    expect(page.get_by_label("Embedding connection")).to_have_value(str(fake_connection.pk))
    shots(page, "store-form")
    page.get_by_label("Name").fill("defaults")
    page.get_by_role("button", name="Create store").click()
    expect(page.get_by_role("status")).to_have_text("Created the store “defaults”. Upload documents to fill it.")
    assert RagStore.objects.get(name="defaults").embedding_connection_id == fake_connection.pk


def test_the_local_model_is_preselected_beside_other_connections(wide_page, personas, fake_connection, chat_connection):
    """A second connection (any OpenAI one can embed) no longer leaves the choice empty: the
    instance's own local model is chosen, and a store made with every default is made."""
    from gateway.connections.models import ModelConnection
    from ragmux.launch.first_run import ensure_local_connection
    from stores.models import RagStore

    ensure_local_connection()
    local = ModelConnection.objects.get(provider_type="local")
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/stores/new")
    expect(page.get_by_label("Embedding connection")).to_have_value(str(local.pk))
    page.get_by_label("Name").fill("defaults")
    page.get_by_role("button", name="Create store").click()
    expect(page.get_by_role("status")).to_have_text("Created the store “defaults”. Upload documents to fill it.")
    assert RagStore.objects.get(name="defaults").embedding_connection_id == local.pk


def test_a_store_holding_chunks_offers_only_its_own_embedding_connection(
    wide_page, personas, handbook, chat_connection
):
    """Any other would be refused on saving ("fixed once the store holds chunks"): it is not offered."""
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/stores/{handbook.pk}/settings")
    choice = page.get_by_label("Embedding connection")
    expect(choice.locator("option")).to_have_count(1)
    expect(choice).to_have_value(str(handbook.embedding_connection_id))
    page.goto("/admin/stores/new")
    expect(page.get_by_label("Embedding connection").locator(f'option[value="{chat_connection.pk}"]')).to_have_count(1)
