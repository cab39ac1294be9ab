"""`GET /admin/api/keys`: every key across projects, filtered by project, revocation and scope,
a page at a time; every role reads it, nothing writes through it."""

from __future__ import annotations

import pytest

from tests.factories import GatewayKeyFactory, ProjectFactory


@pytest.fixture
def keys(db):
    """Two projects: `alpha` with an active key of every scope and a revoked retrieve-only key,
    `beta` with one chat-only key."""
    from gateway.clients.services import key_revoke

    alpha, beta = ProjectFactory(name="alpha"), ProjectFactory(name="beta")
    everything = GatewayKeyFactory(project=alpha, name="everything")
    retired = GatewayKeyFactory(project=alpha, name="retired", scopes=["retrieve"])
    key_revoke(api_key=retired)
    chat = GatewayKeyFactory(project=beta, name="chat", scopes=["chat"])
    return {"alpha": alpha, "beta": beta, "everything": everything, "retired": retired, "chat": chat}


def names(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [key["name"] for key in response.json()["keys"]]


def test_every_key_of_every_project_is_listed_with_its_project_and_revocation(api, keys):
    body = api("admin").get("/admin/api/keys").json()
    assert (body["total"], body["page"], body["pages"]) == (3, 1, 1)
    listed = {key["name"]: key for key in body["keys"]}
    assert list(listed) == ["everything", "retired", "chat"]
    assert (listed["chat"]["project_id"], listed["chat"]["project_name"]) == (keys["beta"].id, "beta")
    assert listed["retired"]["revoked_at"] is not None and listed["everything"]["revoked_at"] is None
    assert listed["everything"]["prefix"] == keys["everything"].secret[:15]
    assert not any(keys["everything"].secret in str(value) for value in listed["everything"].values())


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("revoked=false", ["everything", "chat"]),
        ("revoked=true", ["retired"]),
        ("scope=chat", ["everything", "chat"]),
        ("scope=retrieve", ["everything", "retired"]),
        ("scope=retrieve&revoked=false", ["everything"]),
    ],
)
def test_keys_are_filtered_by_revocation_and_scope(api, keys, query, expected):
    assert names(api("admin").get(f"/admin/api/keys?{query}")) == expected


def test_keys_are_filtered_by_project(api, keys):
    admin = api("admin")
    assert names(admin.get(f"/admin/api/keys?project={keys['alpha'].id}")) == ["everything", "retired"]
    assert names(admin.get(f"/admin/api/keys?project={keys['beta'].id}&scope=retrieve")) == []


def test_keys_are_paged(api, keys):
    first = api("admin").get("/admin/api/keys?page_size=2").json()
    second = api("admin").get("/admin/api/keys?page_size=2&page=2").json()
    assert [key["name"] for key in first["keys"] + second["keys"]] == ["everything", "retired", "chat"]
    assert (first["total"], first["pages"], second["page"]) == (3, 2, 2)


@pytest.mark.parametrize(
    ("query", "field"),
    [("scope=admin", "scope"), ("revoked=maybe", "revoked"), ("project=0", "project"), ("page_size=1000", "page_size")],
)
def test_a_bad_filter_is_400_with_the_field_named(api, keys, query, field):
    response = api("admin").get(f"/admin/api/keys?{query}")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


@pytest.mark.parametrize("persona", ["editor", "viewer"])
def test_every_role_reads_the_keys(api, keys, persona):
    assert names(api(persona).get("/admin/api/keys")) == ["everything", "retired", "chat"]


def test_an_outsider_and_an_anonymous_caller_read_no_keys(api, keys):
    outsider = api("outsider").get("/admin/api/keys")
    assert outsider.status_code == 403 and outsider.json()["error"]["code"] == "forbidden"
    assert api().get("/admin/api/keys").status_code == 401


@pytest.mark.parametrize("persona", ["admin", "editor", "viewer"])
def test_keys_are_not_created_through_the_list(api, keys, persona):
    response = api(persona).post("/admin/api/keys", json={"name": "k"})
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
