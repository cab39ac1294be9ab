"""Routes in the admin API: admins write, every role reads, every change is audited."""

from __future__ import annotations

import pytest

from gateway.connections.models import RouteTarget
from ragmux.core.models import AuditEntry
from tests.factories import ConnectionFactory, ProjectFactory, RouteFactory, RouteTargetFactory


@pytest.fixture
def chats(db):
    return [ConnectionFactory(name=f"chat-{n}", model_name="gpt-4o-mini") for n in range(3)]


def route_body(chats, **overrides):
    body = {
        "name": "smart",
        "kind": "chat",
        "strategy": "ordered",
        "targets": [
            {"connection_id": chats[0].id},
            {"connection_id": chats[1].id, "model_name": "gpt-4o", "weight": 3, "first_byte_timeout": 2.5},
        ],
    }
    body.update(overrides)
    return body


def test_admin_creates_reads_replaces_and_deletes_a_route(api, chats):
    admin = api("admin")
    created = admin.post("/admin/api/routes", json=route_body(chats))
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["kind"], body["strategy"]) == ("smart", "chat", "ordered")
    assert body["targets"] == [
        {
            "position": 0,
            "connection_id": chats[0].id,
            "connection_name": "chat-0",
            "model_name": "",
            "effective_model_name": "gpt-4o-mini",
            "weight": 1,
            "first_byte_timeout": None,
        },
        {
            "position": 1,
            "connection_id": chats[1].id,
            "connection_name": "chat-1",
            "model_name": "gpt-4o",
            "effective_model_name": "gpt-4o",
            "weight": 3,
            "first_byte_timeout": 2.5,
        },
    ]
    assert [r["name"] for r in api("viewer").get("/admin/api/routes").json()] == ["smart"]
    assert api("editor").get(f"/admin/api/routes/{body['id']}").json() == body

    replaced = admin.put(
        f"/admin/api/routes/{body['id']}",
        json=route_body(
            chats,
            name="smart-v2",
            strategy="weighted",
            targets=[{"connection_id": chats[2].id, "weight": 2}, {"connection_id": chats[0].id}],
        ),
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["strategy"] == "weighted"
    assert [(t["connection_name"], t["weight"]) for t in replaced.json()["targets"]] == [("chat-2", 2), ("chat-0", 1)]
    assert RouteTarget.objects.filter(route_id=body["id"]).count() == 2

    assert admin.delete(f"/admin/api/routes/{body['id']}").json() == {"ok": True}
    assert admin.get(f"/admin/api/routes/{body['id']}").status_code == 404
    assert RouteTarget.objects.count() == 0


def test_every_change_is_audited_with_its_targets(api, chats):
    admin = api("admin")
    route = admin.post("/admin/api/routes", json=route_body(chats)).json()
    admin.put(f"/admin/api/routes/{route['id']}", json=route_body(chats, targets=[{"connection_id": chats[2].id}]))
    admin.delete(f"/admin/api/routes/{route['id']}")

    entries = {e.action: e for e in AuditEntry.objects.filter(object_type="route", object_id=route["id"])}
    assert set(entries) == {"route.create", "route.update", "route.delete"}
    assert entries["route.create"].actor_username == "admin"
    assert [t["connection_id"] for t in entries["route.create"].after["targets"]] == [chats[0].id, chats[1].id]
    assert entries["route.update"].before["targets"][1]["weight"] == 3
    assert entries["route.update"].after == {
        "targets": [{"connection_id": chats[2].id, "model_name": "", "weight": 1, "first_byte_timeout": None}]
    }
    assert entries["route.delete"].before["name"] == "smart"


def test_a_route_that_changes_nothing_writes_no_audit_row(api, chats):
    admin = api("admin")
    route = admin.post("/admin/api/routes", json=route_body(chats)).json()
    assert admin.put(f"/admin/api/routes/{route['id']}", json=route_body(chats)).status_code == 200
    assert not AuditEntry.objects.filter(action="route.update").exists()


REFUSALS = [
    ("no targets", {"targets": []}, "targets.non_field_errors"),
    ("seventeen targets", {"targets": "17"}, "targets.non_field_errors"),
    ("no such connection", {"targets": [{"connection_id": 999999}]}, "targets.0.connection_id"),
    ("zero weight", {"targets": [{"connection_id": "0", "weight": 0}]}, "targets.0.weight"),
    ("huge weight", {"targets": [{"connection_id": "0", "weight": 10**30}]}, "targets.0.weight"),
    ("zero timeout", {"targets": [{"connection_id": "0", "first_byte_timeout": 0}]}, "targets.0.first_byte_timeout"),
    (
        "day-long timeout",
        {"targets": [{"connection_id": "0", "first_byte_timeout": 86400}]},
        "targets.0.first_byte_timeout",
    ),
    (
        "timeout as text",
        {"targets": [{"connection_id": "0", "first_byte_timeout": "soon"}]},
        "targets.0.first_byte_timeout",
    ),
    ("bad model name", {"targets": [{"connection_id": "0", "model_name": "../x"}]}, "targets.0.model_name"),
    ("NUL in model name", {"targets": [{"connection_id": "0", "model_name": "a\x00b"}]}, "targets.0.model_name"),
    ("unknown target field", {"targets": [{"connection_id": "0", "priority": 1}]}, "targets.0.priority"),
    ("a target that is no object", {"targets": ["chat-0"]}, "targets.0.non_field_errors"),
    ("same target twice", {"targets": [{"connection_id": "0"}, {"connection_id": "0"}]}, "targets.1.connection_id"),
    ("name with a space", {"name": "my route"}, "name"),
    ("empty name", {"name": "  "}, "name"),
    ("unknown kind", {"kind": "embedding"}, "kind"),
    ("unknown strategy", {"strategy": "random"}, "strategy"),
    ("embedder in a chat route", {"targets": [{"connection_id": "local"}]}, "targets.0.connection_id"),
    ("rerank API in a chat route", {"targets": [{"connection_id": "cohere"}]}, "targets.0.connection_id"),
]


def _resolved(value, chats, others):
    """The refusal table's placeholders: "0" is the first chat connection, "17" seventeen
    targets, "local" and "cohere" connections that cannot chat."""
    if value == "17":
        return [{"connection_id": chats[0].id, "model_name": f"m{n}"} for n in range(17)]
    if isinstance(value, list):
        return [_resolved(item, chats, others) for item in value]
    if isinstance(value, dict) and "connection_id" in value:
        connection_id = value["connection_id"]
        if isinstance(connection_id, str):
            connection_id = chats[0].id if connection_id == "0" else others[connection_id].id
        return {**value, "connection_id": connection_id}
    return value


@pytest.mark.parametrize(("label", "change", "field"), REFUSALS, ids=[row[0] for row in REFUSALS])
def test_a_route_that_could_not_work_is_refused_naming_the_field(api, chats, label, change, field):
    others = {
        "local": ConnectionFactory(name="local", provider_type="local", model_name="all-MiniLM-L6-v2"),
        "cohere": ConnectionFactory(name="cohere", provider_type="cohere_rerank", model_name="rerank-v3.5"),
    }
    body = route_body(chats, **{name: _resolved(value, chats, others) for name, value in change.items()})
    response = api("admin").post("/admin/api/routes", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["fields"], error
    assert not AuditEntry.objects.filter(object_type="route").exists()


def test_a_rerank_route_may_mix_rerank_apis_and_chat_models(api, chats):
    cohere = ConnectionFactory(name="cohere", provider_type="cohere_rerank", model_name="rerank-v3.5")
    voyage = ConnectionFactory(name="voyage", provider_type="voyage_rerank", model_name="rerank-2")
    body = route_body(
        chats,
        kind="rerank",
        targets=[{"connection_id": cohere.id}, {"connection_id": voyage.id}, {"connection_id": chats[0].id}],
    )
    response = api("admin").post("/admin/api/routes", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["kind"] == "rerank"


def test_route_names_are_unique(api, chats):
    admin = api("admin")
    admin.post("/admin/api/routes", json=route_body(chats))
    again = admin.post("/admin/api/routes", json=route_body(chats))
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "duplicate_name"


def test_a_route_a_project_uses_cannot_be_deleted_nor_stop_being_a_chat_route(api, chats):
    admin = api("admin")
    chatting = RouteTargetFactory(connection=chats[0]).route
    allowed = RouteTargetFactory(connection=chats[1]).route
    project = ProjectFactory(name="support", chat_connection=None, chat_route=chatting)
    project.allowed_routes.add(allowed)

    for route in (chatting, allowed):
        refused = admin.delete(f"/admin/api/routes/{route.id}")
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "route_in_use"
        assert "project 'support'" in refused.json()["error"]["message"]
    to_rerank = admin.put(f"/admin/api/routes/{chatting.id}", json=route_body(chats, name=chatting.name, kind="rerank"))
    assert to_rerank.status_code == 409
    assert to_rerank.json()["error"]["code"] == "route_in_use"
    assert not AuditEntry.objects.filter(object_type="route").exists()


def test_a_connection_a_route_uses_cannot_be_deleted(api, chats):
    RouteTargetFactory(route=RouteFactory(name="smart"), connection=chats[0])
    refused = api("admin").delete(f"/admin/api/models/{chats[0].id}")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "connection_in_use"


@pytest.mark.parametrize("persona", ["editor", "viewer", "outsider"])
def test_only_admins_write_routes(api, chats, persona):
    existing = RouteTargetFactory(connection=chats[0]).route
    client = api(persona)
    attempts = [
        client.post("/admin/api/routes", json=route_body(chats, name="other")),
        client.put(f"/admin/api/routes/{existing.id}", json=route_body(chats)),
        client.delete(f"/admin/api/routes/{existing.id}"),
    ]
    assert [r.status_code for r in attempts] == [403, 403, 403]
    assert all(r.json()["error"]["code"] == "forbidden" for r in attempts)
    assert [r["name"] for r in api("admin").get("/admin/api/routes").json()] == [existing.name]


def test_an_outsider_cannot_read_routes_and_no_credentials_is_401(api, chats):
    route = RouteTargetFactory(connection=chats[0]).route
    assert api("outsider").get("/admin/api/routes").status_code == 403
    assert api("outsider").get(f"/admin/api/routes/{route.id}").status_code == 403
    assert api().get("/admin/api/routes").status_code == 401
    assert api().post("/admin/api/routes", json=route_body(chats)).status_code == 401


def test_an_unknown_route_is_a_404(api):
    response = api("viewer").get("/admin/api/routes/999999")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
