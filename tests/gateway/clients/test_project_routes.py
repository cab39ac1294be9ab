"""A project's chat through a route, the routes its keys may call by name, and what `/v1/models`
shows of them."""

from __future__ import annotations

import openai
import pytest

from gateway.clients.models import Project
from ragmux.core.models import AuditEntry
from tests.factories import ConnectionFactory, RouteFactory, RouteTargetFactory


@pytest.fixture
def chat_route(chat_connection):
    return RouteTargetFactory(route=RouteFactory(name="smart"), connection=chat_connection).route


@pytest.fixture
def rerank_route(db):
    cohere = ConnectionFactory(name="cohere", provider_type="cohere_rerank", model_name="rerank-v3.5")
    return RouteTargetFactory(route=RouteFactory(name="sharp", kind="rerank"), connection=cohere).route


def test_a_project_chats_through_a_route_and_allows_others(api, chat_route, rerank_route, chat_connection):
    admin = api("admin")
    other = RouteTargetFactory(route=RouteFactory(name="cheap"), connection=chat_connection).route
    created = admin.post(
        "/admin/api/projects",
        json={"name": "support", "chat_route_id": chat_route.id, "allowed_route_ids": [other.id, rerank_route.id]},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["chat_connection_id"], body["chat_route_id"]) == (None, chat_route.id)
    assert sorted(body["allowed_route_ids"]) == sorted([other.id, rerank_route.id])
    assert api("viewer").get("/admin/api/projects").json()[0]["chat_route_id"] == chat_route.id

    # A full update that leaves the allowed routes out keeps them; a chat connection replaces the route.
    put = admin.put(
        f"/admin/api/projects/{body['id']}", json={"name": "support", "chat_connection_id": chat_connection.id}
    )
    assert put.status_code == 200, put.text
    assert (put.json()["chat_connection_id"], put.json()["chat_route_id"]) == (chat_connection.id, None)
    assert sorted(put.json()["allowed_route_ids"]) == sorted([other.id, rerank_route.id])
    # ...and a route replaces the connection, on a partial update too.
    patched = admin.patch(
        f"/admin/api/projects/{body['id']}", json={"chat_route_id": other.id, "allowed_route_ids": []}
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["chat_connection_id"], patched.json()["chat_route_id"]) == (None, other.id)
    assert patched.json()["allowed_route_ids"] == []


def test_the_routes_a_project_allows_are_audited(api, chat_route, rerank_route, chat_connection):
    admin = api("admin")
    project = admin.post("/admin/api/projects", json={"name": "support", "chat_connection_id": chat_connection.id})
    project_id = project.json()["id"]
    admin.patch(
        f"/admin/api/projects/{project_id}",
        json={"chat_route_id": chat_route.id, "allowed_route_ids": [rerank_route.id]},
    )
    entry = AuditEntry.objects.get(action="project.update", object_id=project_id)
    assert entry.before == {"chat_connection_id": chat_connection.id, "chat_route_id": None, "allowed_route_ids": []}
    assert entry.after == {
        "chat_connection_id": None,
        "chat_route_id": chat_route.id,
        "allowed_route_ids": [rerank_route.id],
    }


REFUSALS = [
    ("neither", {}, "chat_connection_id"),
    ("both", {"chat_connection_id": "chat", "chat_route_id": "chat-route"}, "chat_route_id"),
    ("no such route", {"chat_route_id": 999999}, "chat_route_id"),
    ("a rerank route for chat", {"chat_route_id": "rerank-route"}, "chat_route_id"),
    ("no such allowed route", {"chat_connection_id": "chat", "allowed_route_ids": [999999]}, "allowed_route_ids"),
    ("allowed routes not a list", {"chat_connection_id": "chat", "allowed_route_ids": 7}, "allowed_route_ids"),
    ("a huge allowed route id", {"chat_connection_id": "chat", "allowed_route_ids": [10**30]}, "allowed_route_ids.0"),
    (
        "an allowed route id as text",
        {"chat_connection_id": "chat", "allowed_route_ids": ["smart"]},
        "allowed_route_ids.0",
    ),
]


@pytest.mark.parametrize(("label", "fields", "field"), REFUSALS, ids=[row[0] for row in REFUSALS])
def test_a_project_chats_through_one_connection_or_one_chat_route(
    api, chat_route, rerank_route, chat_connection, label, fields, field
):
    ids = {"chat": chat_connection.id, "chat-route": chat_route.id, "rerank-route": rerank_route.id}
    body = {
        "name": "support",
        **{name: ids.get(value, value) if isinstance(value, str) else value for name, value in fields.items()},
    }
    response = api("admin").post("/admin/api/projects", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert field in response.json()["error"]["fields"]
    assert not Project.objects.exists()


def test_a_project_chatting_through_a_route_lists_it_in_v1_models(
    asgi_url, v1, chat_route, rerank_route, fake_connection
):
    from gateway.clients.services import key_create, project_create

    project = project_create(
        name="routed",
        chat_route_id=chat_route.id,
        allowed_route_ids=[rerank_route.id],
        embedding_connection_id=fake_connection.id,
        store_id=None,
        system_prompt="",
    )
    key = key_create(project=project, name="default", scopes=None, expires_at=None).key
    sdk = openai.OpenAI(base_url=f"{asgi_url}/v1", api_key=key, max_retries=0, timeout=30)
    with sdk:
        listed = sdk.models.list()
        assert [(m.id, m.owned_by) for m in listed.data] == [
            ("text-embedding-3-small", "openai"),
            ("sharp", "ragmux"),
            ("smart", "ragmux"),
        ]
        assert sdk.models.retrieve("smart").owned_by == "ragmux"
        with pytest.raises(openai.NotFoundError):
            sdk.models.retrieve("gpt-4o-mini")


def test_a_route_named_like_the_chat_model_stands_for_it_in_v1_models(v1, project, project_key, chat_connection):
    RouteTargetFactory(route=RouteFactory(name="gpt-4o-mini"), connection=chat_connection)
    project.allowed_routes.add(RouteFactory._meta.model.objects.get(name="gpt-4o-mini"))
    listed = v1(project_key).get("/models").json()["data"]
    assert [(m["id"], m["owned_by"]) for m in listed] == [
        ("gpt-4o-mini", "ragmux"),
        ("text-embedding-3-small", "openai"),
    ]
