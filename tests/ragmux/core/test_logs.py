"""JSON logs that join up: every line a request causes carries its id, the worker's included."""

import json
import logging
import subprocess
import sys
import time

import httpx
import pytest

from ragmux.core import logs
from ragmux.core.authentication import issue_admin_token
from ragmux.launch.embedded import free_port
from stores.models import Document
from stores.services import store_create
from tests.helpers import web_process

# What Celery prints itself, from its signal handlers, rather than logs.
CELERY_NOTICES = ("worker: Warm shutdown (MainProcess)",)


def json_lines(path) -> list[dict]:
    """Every line of a log, each of which must be one JSON object."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [json.loads(line) for line in lines if line and line not in CELERY_NOTICES]


def record(message: str, *args, **extra) -> logging.LogRecord:
    made = logging.getLogger("ragmux.test").makeRecord("ragmux.test", logging.INFO, __file__, 1, message, args, None)
    made.__dict__.update(extra)
    return made


def formatted(line: logging.LogRecord) -> dict:
    logs.RequestIdFilter().filter(line)
    return json.loads(logs.JsonFormatter().format(line))


def test_a_json_line_carries_the_request_id_and_the_callers_fields():
    logs.begin("req-1")
    try:
        line = formatted(record("document ingested %s", 7, document_id=7, store_id=3))
    finally:
        logs.end()
    assert line["message"] == "document ingested 7"
    assert (line["level"], line["logger"], line["request_id"]) == ("info", "ragmux.test", "req-1")
    assert (line["document_id"], line["store_id"]) == (7, 3)
    assert formatted(record("outside any request"))["request_id"] is None


def test_a_traceback_stays_inside_its_line():
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        line = record("failed")
        line.exc_info = sys.exc_info()
    text = logs.JsonFormatter().format(line)
    assert "\n" not in text
    assert "ValueError: boom" in json.loads(text)["exception"]


@pytest.mark.parametrize(
    ("incoming", "kept"),
    [
        ("trace-42.a:b_c", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("two words", False),
        ('quote"d', False),
        ("line\nbreak", False),
        ("", False),
        (None, False),
    ],
)
def test_only_a_plain_incoming_request_id_is_kept(incoming, kept):
    chosen = logs.incoming_or_new_id(incoming)
    assert (chosen == incoming) is kept
    if not kept:
        assert len(chosen) == 32


def test_api_answers_echo_a_plain_request_id_and_replace_another(api):
    client = api("viewer")
    assert client.get("/admin/api/me", headers={"X-Request-Id": "from-the-edge-1"}).headers["X-Request-Id"] == (
        "from-the-edge-1"
    )
    replaced = client.get("/admin/api/me", headers={"X-Request-Id": "bad id"}).headers["X-Request-Id"]
    assert replaced != "bad id" and len(replaced) == 32


@pytest.mark.django_db
def test_a_task_run_eagerly_inside_a_request_leaves_the_requests_id_in_place(monkeypatch):
    from ragmux.celery import app
    from ragmux.core.tasks import purge_audit_entries

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    logs.begin("req-eager")
    try:
        purge_audit_entries.delay()
        assert logs.current_request_id() == "req-eager"
    finally:
        logs.end()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_line_an_upload_causes_carries_its_id_in_the_web_process_and_the_worker(
    subprocess_env, settings, personas, fake_connection, tmp_path
):
    env = {
        **subprocess_env,
        "LOG_FORMAT": "json",
        "INGEST_WORKERS": "1",
        "RAGMUX_DATA_DIR": str(tmp_path),
        # The suite may run as root, which Celery warns about before any logging is set up.
        "PYTHONWARNINGS": "ignore:You're running the worker with superuser privileges",
    }
    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
    token = issue_admin_token(user=personas["editor"])
    settings.PORT, settings.WEB_WORKERS = free_port(), 1
    worker_log = tmp_path / "worker.log"
    with open(worker_log, "w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ragmux.launch.cli", "worker"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with web_process(env, log_path=tmp_path / "web.log") as web:
            response = httpx.post(
                f"{web.url}/admin/api/rag-stores/{store.pk}/documents",
                headers={"Authorization": f"Bearer {token}", "X-Request-Id": "upload-7f3a"},
                files=[("files", ("notes.txt", b"Some words worth finding later.", "text/plain"))],
                timeout=30,
            )
            assert response.status_code == 202, response.text
            assert response.headers["X-Request-Id"] == "upload-7f3a"
            (document_id,) = [d["id"] for d in response.json()["documents"]]
            deadline = time.monotonic() + 90
            while Document.objects.get(pk=document_id).status != "ready":
                assert time.monotonic() < deadline, worker_log.read_text()[-3000:]
                time.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(timeout=60)

    web_lines = json_lines(tmp_path / "web.log")
    caused = [line for line in web_lines if line["request_id"] == "upload-7f3a"]
    (access,) = [line for line in caused if line["logger"] == "ragmux.access"]
    assert access["method"] == "POST" and access["status"] == 202 and access["user"] == "editor"
    assert access["endpoint"] == "admin/api/rag-stores/<id:store_id>/documents"
    assert access["latency_ms"] > 0
    # Every access line of the web process is its own request's: /healthz polls have ids of their own.
    assert all(line["request_id"] for line in web_lines if line["logger"] == "ragmux.access")

    worker_lines = json_lines(worker_log)
    (ingested,) = [line for line in worker_lines if line["message"].startswith("document ingested")]
    assert ingested["request_id"] == "upload-7f3a"
    assert (ingested["document_id"], ingested["store_id"], ingested["chunks"]) == (document_id, store.pk, 1)
    # The worker did nothing but this upload's task: every line of ragmux's own after its start-up
    # (which no request causes) carries the upload's id.
    task_lines = [
        line for line in worker_lines if line["logger"].startswith("ragmux") and line["logger"] != "ragmux.startup"
    ]
    assert {line["request_id"] for line in task_lines} == {"upload-7f3a"}
