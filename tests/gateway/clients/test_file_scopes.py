"""The scopes of files and vector stores (`files_read`, `files_write`): given to a key created
without scopes, offered by the admin API, and given by the migration to every key that held every
scope before them."""

from __future__ import annotations

from importlib import import_module

import pytest

from gateway.clients.models import GatewayKey, Scope
from tests.factories import GatewayKeyFactory, ProjectFactory

FILE_SCOPES = ["files_read", "files_write"]


@pytest.fixture
def project(db):
    return ProjectFactory(name="shared")


def test_a_key_created_without_scopes_reads_and_writes_files(api, project):
    created = api("admin").post(f"/admin/api/projects/{project.pk}/keys", json={"name": "all"})
    assert created.status_code == 201, created.text
    assert set(FILE_SCOPES) <= set(created.json()["api_key"]["scopes"]) == set(Scope.values)


def test_the_admin_api_gives_a_key_the_file_scopes_alone(api, project):
    created = api("admin").post(
        f"/admin/api/projects/{project.pk}/keys", json={"name": "reader", "scopes": ["files_read"]}
    )
    assert created.status_code == 201, created.text
    assert GatewayKey.objects.get(name="reader").scopes == ["files_read"]
    listed = api("admin").get("/admin/api/keys", params={"scope": "files_write"})
    assert listed.status_code == 200, listed.text
    assert [key["name"] for key in listed.json()["keys"]] == []


def test_the_migration_keeps_every_scope_keys_every_scope(project):
    from django.apps import apps

    migration = import_module("gateway.clients.migrations.0016_files_and_vector_stores")
    every = GatewayKeyFactory(project=project, name="every", scopes=["chat", "retrieve", "rerank", "models"])
    narrow = GatewayKeyFactory(project=project, name="narrow", scopes=["chat", "retrieve"])
    migration.grant_file_scopes_to_every_scope_keys(apps, None)
    every.refresh_from_db()
    narrow.refresh_from_db()
    assert every.scopes == ["chat", "retrieve", "rerank", "models", *FILE_SCOPES]
    assert narrow.scopes == ["chat", "retrieve"]
