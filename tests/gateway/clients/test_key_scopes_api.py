"""A key's document scope (`filters`) through the admin API: admins set it when creating or
editing a key, it is audited and shown; other roles cannot; a hostile scope is a 400."""

from __future__ import annotations

import pytest

from gateway.clients.models import GatewayKey
from ragmux.core.models import AuditEntry
from tests.factories import GatewayKeyFactory, ProjectFactory

ACME = {"type": "eq", "key": "customer", "value": "acme"}


@pytest.fixture
def project(db):
    return ProjectFactory(name="shared")


def create(client, project, **body):
    return client.post(f"/admin/api/projects/{project.pk}/keys", json={"name": "tenant", **body})


def test_an_admin_creates_a_scoped_key_and_the_scope_is_shown_and_audited(api, project):
    response = create(api("admin"), project, filters=ACME)
    assert response.status_code == 201, response.text
    key = response.json()["api_key"]
    assert key["filters"] == ACME
    assert GatewayKey.objects.get(pk=key["id"]).filters == ACME
    assert AuditEntry.objects.get(action="key.create").after["filters"] == ACME
    listed = api("viewer").get(f"/admin/api/projects/{project.pk}/keys").json()
    assert [k["filters"] for k in listed] == [ACME]


def test_a_key_without_a_scope_reads_the_whole_store(api, project):
    assert create(api("admin"), project).json()["api_key"]["filters"] is None


def test_an_admin_changes_and_clears_a_keys_scope(api, project):
    key = GatewayKeyFactory(project=project, name="tenant")
    globex = {"type": "in", "key": "customer", "value": ["globex", "initech"]}
    response = api("admin").patch(f"/admin/api/keys/{key.pk}", json={"filters": globex})
    assert response.status_code == 200, response.text
    assert response.json()["filters"] == globex
    entry = AuditEntry.objects.get(action="key.update")
    assert (entry.before["filters"], entry.after["filters"]) == (None, globex)
    assert api("admin").patch(f"/admin/api/keys/{key.pk}", json={"name": "renamed"}).json()["filters"] == globex
    assert api("admin").patch(f"/admin/api/keys/{key.pk}", json={"filters": None}).json()["filters"] is None


@pytest.mark.parametrize(("persona", "status"), [("editor", 403), ("viewer", 403), ("outsider", 403), (None, 401)])
def test_only_admins_set_a_scope(api, project, persona, status):
    key = GatewayKeyFactory(project=project, name="tenant")
    assert create(api(persona), project, filters=ACME).status_code == status
    assert api(persona).patch(f"/admin/api/keys/{key.pk}", json={"filters": ACME}).status_code == status
    assert GatewayKey.objects.get(pk=key.pk).filters is None


@pytest.mark.parametrize(
    "filters",
    [
        "customer=acme",
        {"type": "eq", "key": "customer"},
        {"type": "eq", "key": "customer", "value": "a\x00"},
        {"type": "in", "key": "customer", "value": list(range(500))},
        {"type": "and", "filters": []},
        {"type": "gt", "key": "tags", "value": "a"},
    ],
)
def test_a_hostile_scope_is_a_400_and_changes_nothing(api, project, filters):
    key = GatewayKeyFactory(project=project, name="tenant")
    response = create(api("admin"), project, filters=filters)
    assert response.status_code == 400, response.text
    assert "filters" in response.json()["error"]["fields"]
    assert api("admin").patch(f"/admin/api/keys/{key.pk}", json={"filters": filters}).status_code == 400
    assert GatewayKey.objects.get(pk=key.pk).filters is None
