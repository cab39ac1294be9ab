"""Connections, prices, users and the audit trail as an admin meets them in a browser, what an
editor sees of them, and the accessibility of every page of the dashboard: axe-core on each,
the keyboard's way through a page, and form errors tied to their fields."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, get_resolver
from playwright.sync_api import expect

from tests.factories import (
    PASSWORD,
    DocumentFactory,
    GatewayKeyFactory,
    ProjectFactory,
    RequestLogFactory,
    RouteTargetFactory,
)
from tests.helpers import LAPTOP, PHONE, sign_in
from tests.ragmux.dashboard.accessibility import assert_accessible, blocking_violations

pytestmark = pytest.mark.browser

KEY = "sk-upstream-secret-1234"


def flash(page):
    return page.locator(".flash p").first


def test_an_admin_connects_tests_prices_manages_a_user_and_reads_the_audit(
    wide_page, personas, fake_upstream, shots, browser, live_server
):
    from django.contrib.auth.models import User

    page = wide_page
    sign_in(page, "admin", PASSWORD)

    page.get_by_role("link", name="Connections").click()
    page.get_by_role("link", name="New connection").click()
    page.get_by_label("Name").fill("upstream")
    page.get_by_label("Provider").select_option("openai")
    page.get_by_label("Base URL").fill("http://10.9.8.7/v1")
    page.get_by_label("Model").fill("text-embedding-3-small")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Create the connection").click()
    expect(page.get_by_role("region", name="Private address refused")).to_contain_text(
        "PRIVATE_UPSTREAM_ALLOWLIST=10.9.8.7"
    )
    expect(page.get_by_label("Base URL")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("API key")).to_have_value("")
    assert_accessible(page)

    page.get_by_label("Base URL").fill(f"{fake_upstream.url}/v1")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Create the connection").click()
    expect(flash(page)).to_have_text("Created the connection “upstream”. Test it to check it answers.")
    page.get_by_role("button", name="Test upstream").click()
    expect(flash(page)).to_have_text(
        re.compile(r"“upstream” works\. Not used yet, .* embeddings answered with vectors of 8 dimensions in \d+ ms\.")
    )
    row = page.locator("tr[data-connection=upstream]")
    expect(row.locator(".last-test")).to_contain_text("8 dimensions in")
    expect(row).to_contain_text("sk-…1234")
    assert KEY not in page.content()
    shots(page, "connections")

    page.get_by_role("link", name="Prices").click()
    row = page.locator('tr[data-price="openai gpt-4o-mini"]')
    expect(row.locator(".preview")).to_have_text("$0.00045")
    expect(row).to_contain_text("built-in")
    row.get_by_role("link", name="Edit openai gpt-4o-mini").click()
    page.get_by_label("Input, USD per million tokens", exact=True).fill("2")
    page.get_by_label("Output, USD per million tokens").fill("4")
    page.get_by_role("button", name="Preview the cost").click()
    expect(page.locator("#preview .preview")).to_have_text("$0.004")
    page.get_by_role("button", name="Save the price").click()
    expect(flash(page)).to_contain_text("one request now costs $0.004")
    expect(row.locator(".preview")).to_have_text("$0.004")
    expect(row).to_contain_text("yours, overrides the built-in price")
    shots(page, "prices")

    page.get_by_role("link", name="Users").click()
    page.get_by_label("Username").fill("erin")
    page.get_by_label("Role").select_option("editor")
    page.get_by_label("Password").fill("first password")
    page.get_by_role("button", name="Create the user").click()
    expect(flash(page)).to_have_text("Created the editor “erin”.")
    shots(page, "users")

    erin = browser.new_context(base_url=live_server.url).new_page()
    sign_in(erin, "erin", "first password")
    expect(erin.get_by_role("heading", name="Overview")).to_be_visible()

    page.get_by_role("link", name="erin").click()
    page.get_by_label("New password").fill("second password")
    page.get_by_role("button", name="Reset the password").click()
    expect(flash(page)).to_have_text("Reset the password of “erin”; their sessions have ended.")
    erin.reload()
    expect(erin.get_by_role("heading", name="Sign in")).to_be_visible()

    sign_in(erin, "erin", "second password")
    expect(erin.get_by_role("heading", name="Overview")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Deactivate erin").click()
    expect(flash(page)).to_contain_text("deactivated, and signed out everywhere")
    shots(page, "user")
    erin.get_by_role("link", name="Stores").click()
    expect(erin.get_by_role("heading", name="Sign in")).to_be_visible()
    assert not User.objects.get(username="erin").is_active
    erin.context.close()

    page.get_by_role("link", name="Audit trail").click()
    table = page.locator("table.audit")
    for action, change in (
        ("connection.create", "api_key_masked: sk-…1234"),
        ("connection.test", "dimensions: 8"),
        ("price.update", "input_per_mtok: 0.15 → 2"),
        ("user.create", "role: editor"),
        ("user.reset_password", "password: (hidden)"),
        ("user.update", "is_active: True → False"),
    ):
        expect(table.locator(f"tr[data-action='{action}']").first).to_contain_text(change)
    html = page.content()
    assert KEY not in html and "first password" not in html and "second password" not in html
    page.get_by_label("What").select_option("price")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.audit tbody tr")).to_have_count(1)
    page.get_by_role("link", name="Clear").click()
    shots(page, "audit")


def test_an_editor_sees_no_controls_and_forged_posts_are_refused(wide_page, personas, fake_connection):
    from gateway.connections.models import ModelPrice

    page = wide_page
    sign_in(page, "editor", PASSWORD)
    page.get_by_role("link", name="Connections").click()
    expect(page.locator("tr[data-connection=fake-openai]")).to_be_visible()
    expect(page.get_by_role("link", name="New connection")).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("^Test"))).to_have_count(0)
    page.get_by_role("link", name="Prices").click()
    expect(page.get_by_role("link", name=re.compile("^Edit"))).to_have_count(0)
    expect(page.get_by_role("button", name="Add the price")).to_have_count(0)
    expect(page.get_by_role("link", name="Users")).to_have_count(0)
    expect(page.get_by_role("link", name="Audit trail")).to_have_count(0)

    price = ModelPrice.objects.get(model="gpt-4o-mini")
    token = page.locator("input[name=csrfmiddlewaretoken]").first.input_value()
    for url, form in (
        (f"/admin/prices/{price.pk}/edit", {"input_per_mtok": "99", "output_per_mtok": "99"}),
        (f"/admin/connections/{fake_connection.pk}/test", {}),
        ("/admin/users/new", {"username": "mallory", "role": "admin", "password": "a long password"}),
        (f"/admin/users/{personas['editor'].pk}/update", {"role": "admin"}),
    ):
        forged = page.request.post(url, form={"csrfmiddlewaretoken": token, **form}, headers={"X-CSRFToken": token})
        assert forged.status == 403, url
        assert "This needs the admin role." in forged.text()
    price.refresh_from_db()
    assert price.source == "builtin"
    assert personas["editor"].groups.get().name == "editor"


# --- accessibility of every page -----------------------------------------------------------------


def dashboard_routes() -> list[str]:
    dashboard = next(p for p in get_resolver().url_patterns if getattr(p, "namespace", None) == "dashboard")
    return [str(entry.pattern) for entry in dashboard.url_patterns if isinstance(entry, URLPattern)]


@pytest.fixture
def page_ids(personas, fake_connection) -> dict[str, int]:
    """An object of each kind a dashboard address names, by the address's parameter."""
    from gateway.connections.models import ModelPrice
    from retrieval.evaluation import run_services
    from retrieval.evaluation import services as evaluation
    from stores.services import store_create

    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.pk})
    document = DocumentFactory(store=store, status="failed", error="no text found", error_stage="parse")
    question = {"text": "what was found?", "judgements": [{"document_id": document.pk, "grade": 1}]}
    evaluation_set = evaluation.evaluation_set_create(store=store, name="checks", questions=[question])
    (run,) = run_services.evaluation_runs_start(
        evaluation_set=evaluation_set, configs=[{"label": "defaults", "overrides": {}}], enqueue=False
    )
    project = ProjectFactory(name="support", chat_connection=fake_connection, store=store)
    api_key = GatewayKeyFactory(project=project, name="app")
    call = RequestLogFactory(project=project, key=api_key, rag_hits=2)
    return {
        "store_id": store.pk,
        "document_id": document.pk,
        "connection_id": fake_connection.pk,
        "price_id": ModelPrice.objects.get(model="gpt-4o-mini").pk,
        "user_id": personas["editor"].pk,
        "project_id": project.pk,
        "key_id": api_key.pk,
        "log_id": call.pk,
        "route_id": RouteTargetFactory(connection=fake_connection).route.pk,
        "set_id": evaluation_set.pk,
        "question_id": evaluation_set.questions.get().pk,
        "run_id": run.pk,
    }


def page_urls(ids: dict[str, int]) -> list[str]:
    """Every dashboard address, its parameters filled in from ``ids``."""
    return ["/admin/" + re.sub(r"<id:(\w+)>", lambda m: str(ids[m.group(1)]), route) for route in dashboard_routes()]


def test_every_page_passes_axe_for_an_admin_and_a_viewer(wide_page, personas, page_ids):
    page = wide_page
    page.goto("/admin/login/")
    assert_accessible(page)
    checked = []
    for persona in ("admin", "viewer"):
        page.context.clear_cookies()
        sign_in(page, persona, PASSWORD)
        for url in page_urls(page_ids):
            # A form's target (405 to a GET) or a piece of a page for htmx: each is checked as
            # part of the page that holds it.
            status = page.request.get(url).status
            if status == 405:
                continue
            assert status in (200, 403), (persona, url, status)
            page.goto(url)
            if not page.evaluate("document.doctype !== null"):
                continue
            assert_accessible(page)
            checked.append((persona, url))
    assert len({url for _, url in checked}) >= 21
    page.goto("/admin/no-such-page")
    assert_accessible(page)


def test_the_keyboard_reaches_the_skip_link_first_and_focus_is_always_visible(wide_page, personas):
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/connections/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    assert skip.evaluate("e => e.getBoundingClientRect().left >= 0")
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()

    page.goto("/admin/connections/")
    order = []
    for _ in range(12):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            """() => {
                const e = document.activeElement, style = getComputedStyle(e);
                return {text: e.innerText.trim(), outline: style.outlineStyle, width: style.outlineWidth};
            }"""
        )
        assert focused["outline"] != "none" and focused["width"] != "0px", focused
        order.append(focused["text"])
    # Skip link, brand, then the sections in reading order, then the account's controls.
    assert order[:12] == [
        "Skip to content",
        "ragmux",
        "Overview",
        "Stores",
        "Search compare",
        "Connections",
        "Routes",
        "Projects",
        "Request logs",
        "Prices",
        "Users",
        "Audit trail",
    ]


def test_weak_passwords_are_refused_wherever_a_password_is_set(wide_page, personas, shots):
    """Django's validators (common, numeric, like the username) on the new-user form, an admin's
    reset and one's own change; the API and `ragmux reset-password` share the same service."""
    from django.contrib.auth.models import User

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/users/")
    page.get_by_label("Username").fill("margarita")
    page.get_by_label("Role").select_option("viewer")
    for weak, reason in (
        ("password", "This password is too common."),
        ("12345678", "This password is entirely numeric."),
        ("margarita1", "The password is too similar to the username."),
    ):
        page.get_by_label("Password").fill(weak)
        page.get_by_role("button", name="Create the user").click()
        expect(page.locator("#errors_password")).to_contain_text(reason)
    shots(page, "users-weak-password")
    assert not User.objects.filter(username="margarita").exists()

    page.get_by_label("Username").fill("margarita")
    page.get_by_label("Password").fill("a long password")
    page.get_by_role("button", name="Create the user").click()
    expect(flash(page)).to_have_text("Created the viewer “margarita”.")
    page.get_by_role("link", name="margarita").click()
    page.get_by_label("New password").fill("qwerty123")
    page.get_by_role("button", name="Reset the password").click()
    expect(page.locator("#errors_password")).to_contain_text("This password is too common.")

    page.goto("/admin/account/password")
    page.get_by_label("Current password").fill(PASSWORD)
    page.get_by_label("New password", exact=True).fill("87654321")
    page.get_by_label("New password again").fill("87654321")
    page.get_by_role("button", name="Change my password").click()
    expect(page.locator("#errors_new_password")).to_contain_text("This password is entirely numeric.")


# The most of a phone's first screen the header (brand, menu button, account) may take.
PHONE_HEADER_MAX_PX = 120

OVERFLOWS = """() => {
    const page = document.documentElement.scrollWidth > window.innerWidth + 1 ? ["the page"] : [];
    const boxes = [...document.querySelectorAll(".table-scroll")]
        .filter((box) => box.scrollWidth > box.clientWidth + 1);
    const named = (box) => box.getAttribute("aria-label") || box.querySelector("caption, th")?.innerText || "a table";
    return [...page, ...boxes.map(named)];
}"""


def test_every_page_fits_a_laptop_without_sideways_scrolling_and_a_phone_too(wide_page, personas, page_ids):
    """At 1280 px no table hides columns behind sideways scrolling; at 390 px neither the page nor
    a table scrolls sideways (rows become labelled cards), the navigation folds under a menu
    button, and axe finds nothing serious."""
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    overflowing = {}
    for url in page_urls(page_ids):
        if page.request.get(url).status != 200:
            continue
        for name, size in (("laptop", LAPTOP), ("phone", PHONE)):
            page.set_viewport_size(size)
            page.goto(url)
            if not page.evaluate("document.doctype !== null"):
                break
            if found := page.evaluate(OVERFLOWS):
                overflowing[(name, url)] = found
            if name == "phone":
                if (height := page.locator(".sidebar").bounding_box()["height"]) > PHONE_HEADER_MAX_PX:
                    overflowing[("phone header", url)] = height
                if violations := blocking_violations(page):
                    overflowing[("phone axe", url)] = [(v["id"], v["nodes"][:2]) for v in violations]
    assert not overflowing, "\n".join(f"{where}: {found}" for where, found in overflowing.items())

    # The folded navigation opens and closes with its button, and leads to every section.
    page.goto("/admin/prices/")
    menu = page.get_by_role("button", name="Menu")
    expect(page.get_by_role("navigation", name="Sections")).to_be_hidden()
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Request logs").click()
    expect(page).to_have_url(re.compile(r"/admin/request-logs/$"))
    expect(page.get_by_role("navigation", name="Sections")).to_be_hidden()
