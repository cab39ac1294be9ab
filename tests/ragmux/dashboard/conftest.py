from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.test import Client

from tests.helpers import LAPTOP, PHONE, WIDE, post
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


# The widths every page is checked and photographed at: ``name.png`` a laptop's, ``name-390.png``
# a phone's.
SHOT_WIDTHS = (("", LAPTOP), ("-390", PHONE))


@pytest.fixture
def shots(tmp_path):
    """``shots(page, name)`` checks the page with axe-core and saves a full-page screenshot at a
    laptop's width and at a phone's (then gives the page its own size back): into
    $RAGMUX_SCREENSHOTS when set (`make screenshots` points it at docs/screenshots), else into
    this test's folder."""
    folder = Path(os.environ.get("RAGMUX_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)

    def shot(page, name: str) -> list[Path]:
        size = page.viewport_size
        paths = []
        for suffix, width in SHOT_WIDTHS:
            page.set_viewport_size(width)
            assert_accessible(page)
            paths.append(folder / f"{name}{suffix}.png")
            page.screenshot(path=paths[-1], full_page=True)
        page.set_viewport_size(size)
        return paths

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


# The Evaluation tab's view tests: a set of the handbook's questions, and the compare form's post.


def address(evaluation_set) -> str:
    return f"/admin/stores/{evaluation_set.store_id}/evaluation/{evaluation_set.pk}/"


def documents(store) -> dict[str, int]:
    from stores.models import Document

    return dict(Document.objects.filter(store=store).values_list("filename", "pk"))


@pytest.fixture
def question_set(handbook):
    """The handbook's three questions, each judged answered by its document."""
    from retrieval.evaluation import services

    evaluation_set = services.evaluation_set_create(store=handbook, name="handbook", questions=[], actor=None)
    ids = documents(handbook)
    for question, filename in QUESTIONS.items():
        services.evaluation_question_add(
            evaluation_set=evaluation_set,
            text=question,
            judgements=[{"document_id": ids[filename], "grade": 1}],
            actor=None,
        )
    return evaluation_set


def start(client, evaluation_set, **sides) -> object:
    """The compare form's post: A lexical over pgvector, B lexical over bm25, unless ``sides`` say
    otherwise (None leaves an input out, as an unticked checkbox is)."""
    data = {
        "a-run": "on", "a-label": "pgvector", "a-mode": "lexical", "a-backend": "pgvector",
        "b-run": "on", "b-label": "bm25", "b-mode": "lexical", "b-backend": "bm25",
        "c-label": "", "c-mode": "hybrid", "c-backend": "pgvector",
        **sides,
    }  # fmt: skip
    return post(client, f"{address(evaluation_set)}evaluate", {k: v for k, v in data.items() if v is not None})
