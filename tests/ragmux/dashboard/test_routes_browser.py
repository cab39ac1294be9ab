"""Routes as an admin meets them in a browser: a weighted route made of two targets, edited,
then one unused deleted; a routed call's attempts in the request log. axe-core runs on every
page shown."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import (
    PASSWORD,
    ConnectionFactory,
    ProjectFactory,
    RequestLogFactory,
    RouteFactory,
    RouteTargetFactory,
)
from tests.helpers import sign_in

pytestmark = pytest.mark.browser


def test_an_admin_makes_a_weighted_route_edits_it_and_deletes_it(wide_page, personas, shots):
    from gateway.connections.models import Route

    for name, model in (("openai-main", "gpt-4o-mini"), ("azure-backup", "gpt-4o-mini"), ("anthropic-last", "claude")):
        ConnectionFactory(name=name, model_name=model, provider_type="anthropic" if "anthropic" in name else "openai")
    page = wide_page
    sign_in(page, "admin", PASSWORD)

    page.get_by_role("link", name="Routes").click()
    expect(page.get_by_text("No routes yet.")).to_be_visible()
    page.get_by_role("link", name="New route").click()
    page.get_by_label("Name").fill("smart")
    page.get_by_label("Strategy").select_option("weighted")
    page.get_by_label("Target 1 connection").select_option(label="openai-main (openai · gpt-4o-mini)")
    page.get_by_label("Target 1 weight").fill("3")
    page.get_by_label("Target 2 connection").select_option(label="azure-backup (openai · gpt-4o-mini)")
    page.get_by_label("Target 2 model").fill("gpt-4o")
    page.get_by_label("Target 2 first-byte timeout in seconds").fill("2.5")
    shots(page, "route-form")
    page.get_by_role("button", name="Create the route").click()
    expect(page.locator(".flash p").first).to_contain_text("Created the route “smart”")
    row = page.locator("tr[data-route=smart]")
    expect(row.locator("ol.targets li")).to_have_text(
        ["openai-main · gpt-4o-mini · weight 3", "azure-backup · gpt-4o · weight 1 · first byte within 2.5 s"]
    )

    # A refused target is announced beside its row, and the page stays accessible.
    page.get_by_role("link", name="Edit smart").click()
    page.get_by_label("Target 3 connection").select_option(label="openai-main (openai · gpt-4o-mini)")
    page.get_by_role("button", name="Save the route").click()
    expect(page.locator("#errors_target_2")).to_contain_text("targets 0 and 2 both call 'gpt-4o-mini'")
    shots(page, "route-form-error")
    page.get_by_label("Target 3 connection").select_option(label="anthropic-last (anthropic · claude)")
    page.get_by_role("button", name="Save the route").click()
    expect(row.locator("ol.targets li")).to_have_count(3)
    shots(page, "routes")
    assert [t.connection.name for t in Route.objects.get(name="smart").targets.all()] == [
        "openai-main",
        "azure-backup",
        "anthropic-last",
    ]

    page.get_by_role("link", name="Delete smart").click()
    page.get_by_role("button", name="Delete the route").click()
    expect(page.locator(".flash p").first).to_contain_text("Deleted the route “smart”")
    assert not Route.objects.exists()


def test_a_routed_call_shows_its_route_target_and_attempts(wide_page, personas, shots):
    project = ProjectFactory(name="support")
    log = RequestLogFactory(
        project=project,
        model="gpt-4o",
        route_name="smart",
        target="azure-backup",
        attempts=[
            {"target": "openai-main", "model": "gpt-4o-mini", "outcome": "http_5xx", "ms": 41},
            {"target": "azure-backup", "model": "gpt-4o", "outcome": "ok", "ms": 388},
        ],
        latency_ms=431,
    )
    page = wide_page
    sign_in(page, "viewer", PASSWORD)
    page.goto(f"/admin/request-logs/{log.pk}")
    route = page.get_by_role("region", name="Route")
    expect(route.locator(".answering-target")).to_have_text("azure-backup")
    expect(route.locator("table.attempts tbody tr")).to_have_count(2)
    shots(page, "request-log-route")


def test_a_new_route_says_no_project_may_call_it_until_one_allows_it(
    wide_page, personas, chat_connection, asgi_url, shots
):
    """The message on creating a route is what /v1/models and the request log show: no project
    calls it until allowed; allowing it on a project from the routes page makes both agree."""
    import httpx

    from gateway.clients.services import key_create, project_create
    from tests.helpers import wait_for_logs

    project = project_create(
        name="support",
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
        chat_connection_id=chat_connection.pk,
    )
    key = key_create(project=project, name="app", scopes=None, expires_at=None).key
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/routes/new")
    page.get_by_label("Name").fill("smart")
    page.get_by_label("Target 1 connection").select_option(label="fake-chat (openai · gpt-4o-mini)")
    page.get_by_role("button", name="Create the route").click()
    flash = page.locator(".flash p").first
    expect(flash).to_contain_text("Created the route “smart”. No project may send “smart” as model yet")
    expect(flash).not_to_contain_text("Clients may now send it")
    row = page.locator("tr[data-route=smart]")
    expect(row.locator("td.allowed")).to_contain_text("none yet")

    def listed_models() -> list[str]:
        with httpx.Client(base_url=f"{asgi_url}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=30) as v1:
            return [model["id"] for model in v1.get("/models").json()["data"]]

    assert "smart" not in listed_models()

    row.get_by_label("Project to allow smart on").select_option(label="support")
    row.get_by_role("button", name="Allow smart on this project").click()
    expect(flash).to_have_text("Keys of “support” may send “smart” as model; it is listed in their /v1/models.")
    expect(row.locator("td.allowed a")).to_have_text("support")
    shots(page, "routes-allowed")
    assert "smart" in listed_models()
    with httpx.Client(base_url=f"{asgi_url}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=30) as v1:
        reply = v1.post("/chat/completions", json={"model": "smart", "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 200, reply.text
    [call] = wait_for_logs(1, project=project, endpoint="chat")
    assert call.route_name == "smart"


def test_a_routes_delete_page_names_the_projects_that_block_it(wide_page, personas, shots):
    from tests.factories import RouteTargetFactory

    route = RouteTargetFactory(connection=ConnectionFactory(name="chat-0", model_name="gpt-4o-mini")).route
    project = ProjectFactory(name="support")
    project.allowed_routes.add(route)
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/routes/{route.pk}/delete")
    blocking = page.locator("ul.blocking li")
    expect(blocking).to_have_text(["support, whose keys may call it"])
    expect(blocking.get_by_role("link", name="support")).to_have_attribute("href", f"/admin/projects/{project.pk}/")
    shots(page, "route-delete-blocked")


def test_a_weight_error_shows_under_its_weight_and_targets_are_added_without_javascript(
    browser, live_server, wide_page, personas, shots
):
    from gateway.connections.models import Route

    names = [f"chat-{n}" for n in range(4)]
    for name in names:
        ConnectionFactory(name=name, model_name=f"model-{name}")
    # Without JavaScript: "Add a target" is a button of the form, not a script.
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    page = context.new_page()
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/routes/new")
    page.get_by_label("Name").fill("wide")
    page.get_by_label("Target 1 connection").select_option(label=f"{names[0]} (openai · model-{names[0]})")
    page.get_by_label("Target 1 weight").fill("0")
    expect(page.get_by_label("Target 3 connection")).to_have_count(0)
    page.get_by_role("button", name="Add a target").click()
    page.get_by_role("button", name="Add a target").click()
    # What was typed is kept, and nothing was saved.
    expect(page.get_by_label("Name")).to_have_value("wide")
    expect(page.get_by_label("Target 1 weight")).to_have_value("0")
    for number, name in enumerate(names, start=1):
        page.get_by_label(f"Target {number} connection").select_option(label=f"{name} (openai · model-{name})")
    assert not Route.objects.exists()

    page.get_by_role("button", name="Create the route").click()
    weight = page.get_by_label("Target 1 weight")
    expect(weight).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#errors_target_weight_0")).to_contain_text("greater than or equal to 1")
    expect(page.locator("#errors_target_0")).to_have_count(0)
    # The refused form keeps its four rows and the spare ones.
    expect(page.get_by_label("Target 6 connection")).to_have_count(1)
    weight.fill("2")
    page.get_by_role("button", name="Create the route").click()
    expect(page.locator(".flash p").first).to_contain_text("Created the route “wide”")
    assert [t.connection.name for t in Route.objects.get(name="wide").targets.all()] == names
    context.close()

    # The same refusal with scripts on, checked by axe and photographed.
    sign_in(wide_page, "admin", PASSWORD)
    wide_page.goto("/admin/routes/new")
    wide_page.get_by_label("Name").fill("narrow")
    wide_page.get_by_label("Target 1 connection").select_option(label=f"{names[0]} (openai · model-{names[0]})")
    wide_page.get_by_label("Target 1 weight").fill("0")
    wide_page.get_by_role("button", name="Create the route").click()
    expect(wide_page.locator("#errors_target_weight_0")).to_be_visible()
    shots(wide_page, "route-form-weight-error")


def test_the_connection_delete_page_names_what_blocks_the_deletion(wide_page, personas, shots):
    from stores.models import RagStore
    from tests.factories import StoreFactory

    used = ConnectionFactory(name="shared", model_name="gpt-4o-mini")
    ProjectFactory(name="support", chat_connection=used)
    RouteTargetFactory(route=RouteFactory(name="smart"), connection=used)
    StoreFactory(name="handbook", embedding_connection=used)
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/connections/{used.pk}/delete")
    blocking = page.locator("ul.blocking li")
    expect(blocking).to_have_text(
        [
            "the store handbook, which embeds with it",
            "the project support, which chats through it",
            "the route smart, which has it as a target",
        ]
    )
    expect(blocking.get_by_role("link", name="support")).to_have_attribute("href", re.compile(r"/admin/projects/\d+"))
    page.get_by_role("button", name="Delete the connection").click()
    expect(page.get_by_role("alert").last).to_contain_text("cannot be deleted while it is in use")
    expect(page.locator("ul.blocking li")).to_have_count(3)
    shots(page, "connection-delete-blocked")
    assert RagStore.objects.filter(name="handbook").exists()
