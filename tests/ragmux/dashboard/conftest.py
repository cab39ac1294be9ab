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


# Three documents on topics apart, and a question each answers (the evaluation pages' tests).
HANDBOOK = {
    "badges.txt": "Contractors renew their building badges every year at the front desk.",
    "parking.txt": "Staff park in the north garage; visitors park at the street meters on Elm Road.",
    "leave.txt": "Annual leave is twenty days a year; request leave in the HR portal two weeks ahead.",
    "lunch.txt": "The cafeteria serves lunch from noon until two, soup on Fridays.",
}
QUESTIONS = {
    "How often do contractors renew their badges?": "badges.txt",
    "Where do visitors park?": "parking.txt",
    "How many days of annual leave are there?": "leave.txt",
}


@pytest.fixture
def handbook(kb, ingest_now):
    """``kb`` holding the handbook's documents, ingested."""
    from ingestion.services import IncomingFile, document_upload

    files = [IncomingFile(name, text.encode()) for name, text in HANDBOOK.items()]
    assert document_upload(store=kb, files=files).refusal is None
    ingest_now()
    return kb


@pytest.fixture
def evaluate_now():
    """Runs the queued evaluation runs in this process, each through its Celery task's own code
    (claim, then execute), as `ingest_now` does ingestion: no worker."""
    from retrieval.models import EvaluationRun
    from retrieval.tasks import evaluation_run

    def evaluate(*, limit: int | None = None) -> None:
        queued = EvaluationRun.objects.filter(status="queued").order_by("pk").values_list("pk", flat=True)
        for run_id in list(queued)[:limit]:
            evaluation_run(run_id)

    return evaluate
