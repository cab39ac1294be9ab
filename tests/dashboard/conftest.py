from __future__ import annotations

import pytest
from django.test import Client


@pytest.fixture
def as_role(personas):
    """``as_role("editor")`` is a test client signed in as that persona, with CSRF checks on."""

    def client(role: str) -> Client:
        signed_in = Client(enforce_csrf_checks=True)
        signed_in.force_login(personas[role])
        return signed_in

    return client


@pytest.fixture
def kb(db, fake_connection):
    """A store embedded by the fake upstream, with small chunks."""
    from stores.services import store_create

    return store_create(
        name="kb", values={"embedding_connection_id": fake_connection.id, "chunk_size": 200, "chunk_overlap": 0}
    )
