from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.test import Client

from tests.helpers import WIDE
from tests.ragmux.dashboard.accessibility import assert_accessible


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


@pytest.fixture
def shots(tmp_path):
    """``shots(page, name)`` checks the page with axe-core and saves a full-page screenshot: into
    $RAGMUX_SCREENSHOTS when set (`make screenshots` points it at docs/screenshots), else into
    this test's folder."""
    folder = Path(os.environ.get("RAGMUX_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)

    def shot(page, name: str) -> Path:
        assert_accessible(page)
        path = folder / f"{name}.png"
        page.screenshot(path=path, full_page=True)
        return path

    return shot


@pytest.fixture
def wide_page(browser, live_server):
    context = browser.new_context(base_url=live_server.url, viewport=WIDE)
    yield context.new_page()
    context.close()
