"""Routes as an admin meets them in a browser: a weighted route made of two targets, edited,
then one unused deleted; a routed call's attempts in the request log. axe-core runs on every
page shown."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ConnectionFactory, ProjectFactory, RequestLogFactory
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
