"""The dashboard's routes pages through Django's test client: who sees which controls, what the
form saves and says, and a route in use kept."""

from __future__ import annotations

import pytest

from gateway.connections.models import Route
from ragmux.core.models import AuditEntry
from tests.factories import ConnectionFactory, ProjectFactory, RouteFactory, RouteTargetFactory
from tests.helpers import post, text

pytestmark = pytest.mark.django_db


@pytest.fixture
def chats(db):
    return [ConnectionFactory(name=f"chat-{n}", model_name="gpt-4o-mini") for n in range(3)]


def test_every_role_reads_the_routes_and_only_admins_see_the_controls(as_role, chats):
    route = RouteFactory(name="smart", strategy="weighted")
    RouteTargetFactory(route=route, connection=chats[0], weight=3, first_byte_timeout=2.5)
    RouteTargetFactory(route=route, connection=chats[1], model_name="gpt-4o")
    for role in ("viewer", "editor"):
        page = as_role(role).get("/admin/routes/")
        assert page.status_code == 200
        words = text(page)
        assert "chat-0 · gpt-4o-mini · weight 3 · first byte within 2.5 s" in words
        assert "chat-1 · gpt-4o · weight 1" in words
        assert "New route" not in words and "/edit" not in page.content.decode()
    admin = as_role("admin").get("/admin/routes/").content.decode()
    assert all(control in admin for control in ("New route", f"/admin/routes/{route.pk}/edit", "/delete"))
    assert as_role("outsider").get("/admin/routes/").status_code == 403


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_the_route_forms_are_refused_to_other_roles(as_role, chats, role):
    route = RouteTargetFactory(connection=chats[0]).route
    client = as_role(role)
    assert client.get("/admin/routes/new").status_code == 403
    assert post(client, "/admin/routes/new", {"name": "forged", "target_connection_0": chats[0].pk}).status_code == 403
    assert post(client, f"/admin/routes/{route.pk}/delete").status_code == 403
    project = ProjectFactory(name="support")
    assert post(client, f"/admin/routes/{route.pk}/allow", {"project": project.pk}).status_code == 403
    assert not project.allowed_routes.exists()
    assert list(Route.objects.values_list("name", flat=True)) == [route.name]


def test_allowing_a_route_on_a_project_keeps_its_other_routes_and_a_bad_project_is_said(as_role, chats):
    first, second = (RouteTargetFactory(connection=chats[0]).route for _ in range(2))
    project = ProjectFactory(name="support")
    project.allowed_routes.add(first)
    admin = as_role("admin")
    response = post(admin, f"/admin/routes/{second.pk}/allow", {"project": project.pk})
    assert response.status_code == 302 and response["Location"] == "/admin/routes/"
    assert set(project.allowed_routes.all()) == {first, second}
    assert AuditEntry.objects.filter(action="project.update").count() == 1
    assert "Choose the project" in text(
        post(admin, f"/admin/routes/{second.pk}/allow", {"project": "x\x00"}, follow=True)
    )
    assert post(admin, f"/admin/routes/{second.pk}/allow", {"project": 99999}).status_code == 404
    assert admin.get(f"/admin/routes/{second.pk}/allow")["Location"] == "/admin/routes/"


def test_an_admin_creates_a_route_from_the_filled_rows_in_order(as_role, chats):
    response = post(
        as_role("admin"),
        "/admin/routes/new",
        {
            "name": "smart",
            "kind": "chat",
            "strategy": "weighted",
            "target_connection_0": chats[2].pk,
            "target_weight_0": "3",
            "target_connection_1": "",
            "target_model_1": "ignored",
            "target_connection_2": chats[0].pk,
            "target_model_2": "gpt-4o",
            "target_timeout_2": "1.5",
        },
    )
    assert response.status_code == 302, text(response)
    route = Route.objects.get(name="smart")
    assert [
        (t.connection.name, t.effective_model_name, t.weight, t.first_byte_timeout) for t in route.targets.all()
    ] == [("chat-2", "gpt-4o-mini", 3, None), ("chat-0", "gpt-4o", 1, 1.5)]
    assert AuditEntry.objects.filter(action="route.create", actor_username="admin").exists()


def test_a_refused_target_is_announced_beside_the_row_it_came_from(as_role, chats):
    cohere = ConnectionFactory(name="cohere", provider_type="cohere_rerank", model_name="rerank-v3.5")
    response = post(
        as_role("admin"),
        "/admin/routes/new",
        {
            "name": "smart",
            "kind": "chat",
            "strategy": "ordered",
            "target_connection_0": chats[0].pk,
            "target_connection_3": cohere.pk,
        },
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert (
        'id="id_target_connection_3" name="target_connection_3" aria-invalid="true" aria-describedby="errors_target_3"'
        in html
    )
    assert 'the cohere_rerank connection "cohere" cannot chat' in text(response)
    assert not Route.objects.exists()


def test_an_admin_edits_a_route_its_targets_filled_in(as_role, chats):
    route = RouteTargetFactory(route=RouteFactory(name="smart"), connection=chats[0], first_byte_timeout=2.0).route
    admin = as_role("admin")
    form = admin.get(f"/admin/routes/{route.pk}/edit").content.decode()
    assert f'<option value="{chats[0].pk}" selected>' in form
    assert 'name="target_timeout_0" value="2"' in form
    response = post(
        admin,
        f"/admin/routes/{route.pk}/edit",
        {"name": "smart", "kind": "chat", "strategy": "ordered", "target_connection_0": chats[1].pk},
    )
    assert response.status_code == 302
    assert [t.connection.name for t in route.targets.all()] == ["chat-1"]


def test_a_route_in_use_is_not_deleted_and_the_page_says_by_what(as_role, chats):
    route = RouteTargetFactory(route=RouteFactory(name="smart"), connection=chats[0]).route
    ProjectFactory(name="support", chat_connection=None, chat_route=route)
    response = post(as_role("admin"), f"/admin/routes/{route.pk}/delete")
    assert response.status_code == 409
    assert "route 'smart' is in use by project 'support'" in text(response)
    assert Route.objects.filter(pk=route.pk).exists()
    unused = RouteTargetFactory(route=RouteFactory(name="spare"), connection=chats[0]).route
    assert post(as_role("admin"), f"/admin/routes/{unused.pk}/delete").status_code == 302
    assert not Route.objects.filter(pk=unused.pk).exists()


def test_a_project_chats_through_a_route_chosen_on_its_form_and_its_pages_say_so(as_role, chats):
    from gateway.clients.models import Project

    smart = RouteTargetFactory(route=RouteFactory(name="smart", strategy="weighted"), connection=chats[0]).route
    RouteTargetFactory(route=smart, connection=chats[1])
    cheap = RouteTargetFactory(route=RouteFactory(name="cheap"), connection=chats[2]).route
    sharp = RouteFactory(name="sharp", kind="rerank")
    admin = as_role("admin")
    form = admin.get("/admin/projects/new").content.decode()
    assert f'<option value="route:{smart.pk}">smart (weighted)</option>' in form
    assert f'value="route:{sharp.pk}"' not in form  # a rerank route cannot answer chat...
    assert f'name="allowed_route_ids" value="{sharp.pk}"' in form  # ...but may be allowed

    response = post(
        admin,
        "/admin/projects/new",
        {"name": "support", "chat": f"route:{smart.pk}", "allowed_route_ids": [cheap.pk, sharp.pk]},
    )
    assert response.status_code == 302, text(response)
    project = Project.objects.get(name="support")
    assert (project.chat_connection, project.chat_route) == (None, smart)
    assert set(project.allowed_routes.all()) == {cheap, sharp}

    for url in ("/admin/projects/", f"/admin/projects/{project.pk}/"):
        words = text(as_role("viewer").get(url))
        assert "route smart" in words and "weighted · 2 targets" in words, url
        assert "cheap, sharp" in words, url
    edit = admin.get(f"/admin/projects/{project.pk}/edit").content.decode()
    assert f'<option value="route:{smart.pk}" selected>' in edit
    assert f'name="allowed_route_ids" value="{cheap.pk}" checked' in edit

    response = post(
        admin, f"/admin/projects/{project.pk}/edit", {"name": "support", "chat": f"connection:{chats[0].pk}"}
    )
    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.chat_connection, project.chat_route, list(project.allowed_routes.all())) == (chats[0], None, [])


def test_a_project_without_a_chat_model_is_refused_beside_the_choice(as_role, chats):
    response = post(as_role("admin"), "/admin/projects/new", {"name": "support", "chat": ""})
    assert response.status_code == 400
    assert 'id="errors_chat"' in response.content.decode()
    assert "chat_connection_id (or chat_route_id) is required" in text(response)


ATTEMPTS = [
    {"target": "chat-0", "model": "gpt-4o-mini", "outcome": "http_5xx", "ms": 12},
    {"target": "chat-1", "model": "gpt-4o-mini", "outcome": "timeout", "ms": 2000},
    {"target": "chat-2", "model": "gpt-4o", "outcome": "ok", "ms": 340},
]


def test_the_request_log_names_the_route_the_answering_target_and_each_attempt(as_role, api):
    from tests.factories import RequestLogFactory

    routed = RequestLogFactory(model="gpt-4o", route_name="smart", target="chat-2", attempts=ATTEMPTS)
    plain = RequestLogFactory(project=routed.project, model="gpt-4o-mini")
    viewer = as_role("viewer")
    listing = text(viewer.get("/admin/request-logs/"))
    assert "gpt-4o route smart, 3 attempts" in listing
    detail = text(viewer.get(f"/admin/request-logs/{routed.pk}"))
    assert "Route smart Answering target chat-2" in detail
    assert (
        "1 chat-0 gpt-4o-mini http_5xx 12 ms 2 chat-1 gpt-4o-mini timeout 2000 ms 3 chat-2 gpt-4o ok 340 ms" in detail
    )
    assert "Answering target" not in text(viewer.get(f"/admin/request-logs/{plain.pk}"))
    [row] = [r for r in api("viewer").get("/admin/api/request-logs").json()["data"] if r["id"] == routed.pk]
    assert (row["route_name"], row["target"], row["attempts"]) == ("smart", "chat-2", ATTEMPTS)


def test_the_audit_page_shows_a_routes_targets_as_json(as_role, chats):
    post(
        as_role("admin"),
        "/admin/routes/new",
        {"name": "smart", "kind": "chat", "strategy": "ordered", "target_connection_0": chats[0].pk},
    )
    page = text(as_role("admin").get("/admin/audit/?object_type=route"))
    target = f'{{"connection_id": {chats[0].pk}, "first_byte_timeout": null, "model_name": "", "weight": 1}}'
    assert f"targets: [{target}]" in page


def test_every_page_and_report_of_a_project_that_chats_through_a_route_answers(as_role, api, chats):
    from tests.factories import RequestLogFactory

    route = RouteTargetFactory(route=RouteFactory(name="smart"), connection=chats[0]).route
    project = ProjectFactory(name="support", chat_connection=None, chat_route=route, budget_daily_tokens=1000)
    log = RequestLogFactory(project=project, model="gpt-4o-mini", route_name="smart", target="chat-0")
    viewer = as_role("viewer")
    for url in (
        "/admin/",
        "/admin/projects/",
        f"/admin/projects/{project.pk}/",
        f"/admin/projects/{project.pk}/spend",
        f"/admin/request-logs/?project={project.pk}",
        f"/admin/request-logs/{log.pk}",
    ):
        assert viewer.get(url).status_code == 200, url
    assert as_role("admin").get(f"/admin/projects/{project.pk}/edit").status_code == 200
    reader = api("viewer")
    for url in (
        f"/admin/api/projects/{project.pk}",
        f"/admin/api/projects/{project.pk}/usage",
        "/admin/api/usage/summary?by_project=1",
        "/admin/api/request-logs.csv",
    ):
        assert reader.get(url).status_code == 200, url
