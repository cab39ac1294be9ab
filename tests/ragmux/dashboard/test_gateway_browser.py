"""Projects, keys, the request log and the overview's usage as an admin meets them in a
browser: a project grounded in a store, a key shown once, a real /v1 call with it, and that
call found in the request log with its sources. axe-core runs on every page shown."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, RequestLogFactory
from tests.helpers import sign_in, wait_for_logs

pytestmark = pytest.mark.browser


def test_an_admin_creates_a_project_and_a_key_and_finds_its_call_in_the_request_log(
    wide_page, personas, chat_connection, falcon_store, asgi_url, shots
):
    from gateway.clients.models import Project

    page = wide_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    sign_in(page, "admin", PASSWORD)

    page.get_by_role("link", name="Projects").click()
    page.get_by_role("link", name="New project").click()
    page.get_by_label("Name").fill("falcon-bot")
    page.get_by_label("Chat model").select_option(label="fake-chat")
    page.get_by_label("RAG store").select_option(label="falcon")
    page.get_by_label("System prompt").fill("You are the Falcon support assistant.")
    page.get_by_label("Follow-up questions").select_option("last_turns")
    expect(page.get_by_label("Follow-up questions")).to_have_accessible_description(re.compile("QUERY_REWRITE_TIMEOUT"))
    shots(page, "project-form")
    page.get_by_role("button", name="Create the project").click()
    expect(page.locator(".flash p").first).to_contain_text("Created the project “falcon-bot”")

    page.get_by_label("Key name").fill("support-app")
    page.get_by_label("rerank").uncheck()
    page.get_by_role("button", name="Create the key").click()
    banner = page.get_by_role("region", name="New key")
    key = banner.locator("#issued-key").inner_text()
    assert key.startswith("sk-proj-")
    banner.get_by_role("button", name="Copy the key").click()
    expect(banner.get_by_role("status")).to_have_text("Copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == key
    expect(page.locator("tr[data-key=support-app]")).to_contain_text("chat, retrieve, models")
    shots(page, "project")
    page.get_by_role("link", name="All projects").click()
    page.get_by_role("link", name="falcon-bot", exact=True).click()
    expect(page.locator("tr[data-key=support-app]")).to_be_visible()
    assert key not in page.content()

    with httpx.Client(base_url=f"{asgi_url}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=30) as v1:
        reply = v1.post(
            "/chat/completions",
            json={"model": "any", "messages": [{"role": "user", "content": "What is the launch code?"}]},
        )
    assert reply.status_code == 200, reply.text
    assert [source["filename"] for source in json.loads(reply.headers["x-ragmux-rag-sources"])] == ["handbook.md"]
    project = Project.objects.get(name="falcon-bot")
    assert project.query_rewrite == "last_turns"
    [call] = wait_for_logs(1, project=project)

    page.get_by_role("link", name="Request logs").click()
    page.get_by_label("Project").select_option(label="falcon-bot")
    page.get_by_label("Status").fill("2xx")
    page.get_by_role("button", name="Filter").click()
    row = page.locator(f"tr[data-log='{call.pk}']")
    expect(row).to_contain_text("falcon-bot")
    expect(row).to_contain_text("gpt-4o-mini")
    expect(page.get_by_role("link", name="Export these as CSV")).to_have_attribute(
        "href", f"/admin/api/request-logs.csv?project={project.pk}&status=2xx"
    )
    shots(page, "request-logs")

    row.get_by_role("link").click()
    expect(page.locator(".rag-hits dd")).to_have_text("1")
    expect(page.get_by_role("region", name="Sources")).to_contain_text("handbook")
    expect(page.locator("ol.sources li")).to_have_count(1)
    expect(page.locator("ol.sources li")).to_contain_text("handbook.md")
    expect(page.get_by_text("Time to first byte")).to_be_visible()
    shots(page, "request-log")

    page.get_by_role("link", name="Projects").click()
    page.get_by_role("link", name="falcon-bot", exact=True).click()
    expect(page.locator("tr[data-key=support-app] .last-used")).not_to_have_text("never")
    page.get_by_role("link", name="Overview").click()
    expect(page.locator("[data-range=day] .requests")).to_have_text("1")
    expect(page.locator("[data-range=week] .requests")).to_have_text("1")
    expect(page.locator("[data-chart] canvas")).to_have_count(6)
    shots(page, "overview-usage")


def test_an_admin_sets_the_limits_of_a_project_and_of_one_of_its_keys(wide_page, personas, chat_connection, shots):
    from gateway.clients.models import GatewayKey, Project
    from gateway.clients.services import key_create, project_create

    project = project_create(
        name="falcon-bot",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
    )
    key_create(project=project, name="support-app", scopes=None, expires_at=None)
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.get_by_role("link", name="Projects").click()
    page.get_by_role("link", name="falcon-bot", exact=True).click()

    limits = page.get_by_role("form", name="The project's limits")
    limits.get_by_label("Requests a minute").fill("60")
    limits.get_by_label("Dollars a day").fill("2.5")
    limits.get_by_label("Dollars a month").fill("-1")
    limits.get_by_role("button", name="Save the limits").click()
    expect(page.locator("#errors_budget_monthly_usd")).to_contain_text("greater than or equal to 0")
    expect(page.get_by_label("Dollars a month")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("Dollars a month").fill("40")
    page.get_by_role("button", name="Save the limits").click()
    expect(page.locator(".flash p").first).to_contain_text("Saved the limits of the project “falcon-bot”")
    expect(page.locator("dl.limits dd")).to_have_text(["60", "no limit", "no limit", "no limit", "$2.50", "$40.00"])
    expect(page.get_by_label("Dollars a day")).to_have_value("2.5")
    shots(page, "project-limits")
    project.refresh_from_db()
    assert (project.rate_limit_rpm, project.budget_daily_usd_micros, project.budget_monthly_usd_micros) == (
        60,
        2_500_000,
        40_000_000,
    )

    row = page.locator("tr[data-key=support-app]")
    expect(row.locator(".key-limits")).to_have_text("none")
    row.get_by_role("link", name="Edit support-app").click()
    page.get_by_label("Key name").fill("support-web")
    page.get_by_label("rerank").uncheck()
    page.get_by_label("Tokens a day").fill("100000")
    page.get_by_label("Dollars a month").fill("7.25")
    shots(page, "key-form")
    page.get_by_role("button", name="Save the key").click()
    expect(page.locator(".flash p").first).to_contain_text("Saved the key “support-web”")
    row = page.locator("tr[data-key=support-web]")
    expect(row.locator(".key-limits")).to_have_text("Tokens a day: 100,000; Dollars a month: $7.25")
    expect(row).to_contain_text("chat, retrieve, models")
    key = GatewayKey.objects.get(project=Project.objects.get(name="falcon-bot"))
    assert (key.name, key.budget_daily_tokens, key.budget_monthly_usd_micros) == ("support-web", 100_000, 7_250_000)

    # The spend the limits are measured by: a call that spent the day's dollars, and one refused.
    RequestLogFactory(project=project, key=key, prompt_tokens=1500, completion_tokens=500, cost_micros=2_500_000)
    RequestLogFactory(project=project, key=key, status_code=429)
    page.reload()
    spend = page.get_by_role("region", name="Spend")
    expect(spend.locator(".budget-meter .label")).to_have_text(
        ["Monthly dollar budget", "Daily dollar budget", "Requests-a-minute limit"]
    )
    daily = spend.locator(".budget-meter", has_text="Daily dollar budget")
    expect(daily.locator(".used")).to_have_text("$2.50 of $2.50")
    expect(daily.get_by_role("meter")).to_have_attribute("aria-label", "daily dollar budget: 100.0% used")
    expect(daily.locator(".resets")).to_contain_text("at 00:00 UTC")
    expect(daily.locator(".forecast")).to_have_text("The daily dollar budget is spent.")
    expect(spend.locator(".refused")).to_have_text("Calls refused by the limits (429): 1 today, 1 this month.")
    shots(page, "project-spend")
    page.get_by_role("link", name="Overview").click()
    overview = page.locator(".project-spend[data-project=falcon-bot]")
    expect(overview.get_by_role("meter")).to_have_count(3)
    expect(overview.get_by_role("meter").nth(1)).to_have_attribute(
        "aria-label", "falcon-bot: daily dollar budget: 100.0% used"
    )
    expect(overview.locator(".refused")).to_contain_text("1 today")
    shots(page, "overview-spend")


def test_money_counts_and_meters_are_written_one_way_and_coloured_by_their_state(
    wide_page, personas, chat_connection, shots
):
    """A spent daily budget: its meter is in its bad region (red), the monthly forecast is not
    shown while no call gets through, and every amount and count is written one way."""
    from gateway.clients.services import project_create

    project = project_create(
        name="falcon-bot",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
        budget_daily_tokens=20_000,
        budget_daily_usd_micros=1_500_000,
        budget_monthly_usd_micros=40_000_000,
    )
    RequestLogFactory(project=project, prompt_tokens=16_000, completion_tokens=849, cost_micros=1_500_000)
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/projects/{project.pk}/")
    expect(page.locator("dl.limits dd")).to_have_text(["no limit", "no limit", "20,000", "no limit", "$1.50", "$40.00"])
    spend = page.get_by_role("region", name="Spend")
    daily = spend.locator(".budget-meter", has_text="Daily dollar budget")
    expect(daily.locator(".used")).to_have_text("$1.50 of $1.50")
    meter = daily.get_by_role("meter")
    assert meter.evaluate("m => m.value > m.high && m.optimum < m.low")  # the red region
    tokens = spend.locator(".budget-meter", has_text="Daily token budget")
    expect(tokens.locator(".used")).to_have_text("16,849 of 20,000 tokens")
    assert tokens.get_by_role("meter").evaluate("m => m.value > m.low && m.value <= m.high")  # amber
    monthly = spend.locator(".budget-meter", has_text="Monthly dollar budget")
    expect(monthly.locator(".used")).to_have_text("$1.50 of $40.00")
    assert monthly.get_by_role("meter").evaluate("m => m.value <= m.low")  # green
    expect(monthly.locator(".forecast")).to_have_count(0)
    shots(page, "project-spend-blocked")

    page.goto("/admin/request-logs/")
    expect(page.locator("tbody tr").first).to_contain_text("16,849")
    page.goto("/admin/")
    expect(page.locator("[data-range=day] .tokens")).to_have_text("16,849")
