"""What a project reaches of vector stores (its own, and the store an admin gave it) and the file
each searched document came from, read on the event loop."""

from __future__ import annotations

import asyncio

import pytest


def on_loop(coroutine):
    """``coroutine`` run on an event loop of its own, whose database pool is closed after it."""
    from ragmux.core import asyncdb

    async def run():
        try:
            return await coroutine
        finally:
            await asyncdb.close()

    return asyncio.run(run())


@pytest.fixture
def other_project(chat_connection, fake_connection):
    from gateway.clients.services import project_create

    return project_create(
        name="other-bot",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=fake_connection.id,
        store_id=None,
        system_prompt="",
    )


def make_vector_store(project, name="notes"):
    from gateway.clients.vector_store_services import vector_store_create

    return vector_store_create(project=project, name=name, metadata={}, expires_after_days=None, chunking={})


def test_the_stores_come_back_in_the_order_asked_each_once(transactional_db, project):
    from gateway.clients.vector_store_selectors import searchable_stores
    from gateway.clients.vector_store_services import given_vector_store

    given = given_vector_store(project=project)
    owned = make_vector_store(project)
    stores = on_loop(searchable_stores(project=project, vector_store_ids=[owned.id, given.id, owned.id]))

    assert [store.pk for store in stores] == [owned.store_id, project.store_id]
    assert stores[0].embedding_connection.pk == owned.store.embedding_connection_id
    assert owned.store.name == f"falcon-bot / {owned.id}" and not given.owned and given.name == "falcon"


@pytest.mark.parametrize("whose", ["another project's", "unknown", "malformed"])
def test_a_store_the_project_cannot_reach_is_not_found_by_its_id(transactional_db, project, other_project, whose):
    from gateway.clients.vector_store_selectors import searchable_stores
    from gateway.clients.vector_store_services import given_vector_store
    from ragmux.core.errors import NotFound

    own = given_vector_store(project=project)
    unreachable = {
        "another project's": lambda: make_vector_store(other_project).id,
        "unknown": lambda: "vs_" + "0" * 24,
        "malformed": lambda: "vs_'; DROP TABLE x; --",
    }[whose]()
    with pytest.raises(NotFound) as refused:
        on_loop(searchable_stores(project=project, vector_store_ids=[own.id, unreachable]))
    assert unreachable[:40] in refused.value.message


def test_the_given_store_is_out_of_reach_once_the_admin_takes_it_back(transactional_db, project):
    from gateway.clients.models import Project
    from gateway.clients.vector_store_selectors import searchable_stores
    from gateway.clients.vector_store_services import given_vector_store
    from ragmux.core.errors import NotFound

    given = given_vector_store(project=project)
    Project.objects.filter(pk=project.pk).update(store=None)
    project.refresh_from_db()
    with pytest.raises(NotFound):
        on_loop(searchable_stores(project=project, vector_store_ids=[given.id]))


def test_a_document_is_named_by_its_file_or_by_its_own_stable_id(transactional_db, project, ingest_now):
    from gateway.clients.vector_store_ids import document_file_id
    from gateway.clients.vector_store_selectors import files_of_documents
    from gateway.clients.vector_store_services import Attachment, file_create, vector_store_file_attach
    from stores.models import Document

    owned = make_vector_store(project)
    client_file = file_create(project=project, filename="notes.md", purpose="assistants", data=b"# Notes\n\nHello.")
    attached = vector_store_file_attach(vector_store=owned, attachment=Attachment(client_file, {"team": "a"}))
    [handbook] = Document.objects.filter(store=project.store)

    named = on_loop(files_of_documents(document_ids=[attached.document_id, handbook.pk, 10**12]))

    assert named == {
        attached.document_id: (client_file.id, "notes.md"),
        handbook.pk: (document_file_id(handbook.pk), "handbook.md"),
    }
    assert attached.document.attributes == {"team": "a"}
