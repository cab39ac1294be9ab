"""A call's page in the request log shows what applies to its endpoint: a `/v1/models` call
searched no store and cost nothing, so it says neither."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import sign_in, wait_for_logs

pytestmark = pytest.mark.browser


def _falcon_bot(chat_connection, store):
    """A project chatting through ``chat_connection``, grounded in ``store``."""
    from gateway.clients.services import project_create

    return project_create(
        name="falcon-bot",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=None,
        store_id=store.id,
        system_prompt="",
    )


def test_a_models_call_shows_no_store_and_no_pricing(
    wide_page, personas, chat_connection, falcon_store, asgi_url, shots
):
    from gateway.clients.services import key_create

    project = _falcon_bot(chat_connection, falcon_store)
    issued = key_create(project=project, name="support-app", scopes=None, expires_at=None)
    with httpx.Client(base_url=f"{asgi_url}/v1", headers={"Authorization": f"Bearer {issued.key}"}) as v1:
        assert v1.get("/models").status_code == 200
    [call] = wait_for_logs(1, project=project)

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/request-logs/{call.pk}")
    expect(page.get_by_role("heading", name=f"Call {call.pk}: models, 200")).to_be_visible()
    expect(page.get_by_text("Store searched")).to_have_count(0)
    expect(page.get_by_role("region", name="Sources")).to_have_count(0)
    expect(page.get_by_text("Priced from the price table")).to_have_count(0)
    expect(page.get_by_text("Prompt tokens")).to_have_count(0)
    expect(page.get_by_text("Latency")).to_be_visible()
    shots(page, "request-log-models")


def test_a_calls_page_says_its_rerank_fell_back_and_why(wide_page, personas, chat_connection, falcon_store, shots):
    from gateway.clients.models import RequestLog

    project = _falcon_bot(chat_connection, falcon_store)
    reason = "cohere_rerank named none of the 6 passages it was sent"
    call = RequestLog.objects.create(
        project=project, endpoint="retrieve", status_code=200, rerank_outcome="fallback", rerank_reason=reason
    )

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/request-logs/{call.pk}")
    sources = page.get_by_role("region", name="Sources")
    expect(sources.locator(".rerank-outcome dt")).to_have_text("Rerank")
    expect(sources.locator(".rerank-outcome dd")).to_have_text(f"Fallback: {reason}")
    shots(page, "request-log-rerank-fallback")


def test_a_refused_call_shows_no_tokens_and_the_csv_names_projects_keys_and_dollars(wide_page, personas, shots):
    import csv
    import io

    from tests.factories import GatewayKeyFactory, ProjectFactory, RequestLogFactory

    project = ProjectFactory(name="falcon-bot")
    key = GatewayKeyFactory(project=project, name="support-app")
    refused = RequestLogFactory(project=project, key=key, endpoint="chat", status_code=429)
    priced = RequestLogFactory(
        project=project,
        key=key,
        endpoint="chat",
        prompt_tokens=1000,
        completion_tokens=500,
        cost_micros=52_500,
        cost_source="price_table",
    )
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/request-logs/{refused.pk}")
    expect(page.get_by_text("Prompt tokens")).to_have_count(0)
    expect(page.locator(".refused-spent")).to_have_text(
        "Refused with HTTP 429 before any model ran: no tokens were spent and it costs nothing."
    )
    expect(page.get_by_text("Priced from the price table")).to_have_count(0)
    shots(page, "request-log-refused")
    page.goto(f"/admin/request-logs/{priced.pk}")
    expect(page.get_by_text("Prompt tokens")).to_be_visible()
    expect(page.get_by_text("The cost is these tokens at the rates of the Prices page")).to_be_visible()

    page.goto("/admin/request-logs/")
    with page.expect_download() as download:
        page.get_by_role("link", name="Export these as CSV").click()
    rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    by_id = {int(row["id"]): row for row in rows}
    assert (by_id[priced.pk]["project_name"], by_id[priced.pk]["key_name"]) == ("falcon-bot", "support-app")
    assert by_id[priced.pk]["cost_usd"] == "0.0525"
    assert by_id[refused.pk]["cost_usd"] == "0"
