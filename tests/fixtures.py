from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from tests.fakes.upstream import FakeUpstream

# Models are imported inside the fixtures: this module is loaded before Django is set up.

PERSONAS = ("admin", "editor", "viewer", "outsider")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _forget_failed_sign_ins():
    """Every test comes from 127.0.0.1, so one test's failed sign-ins would throttle the next."""
    yield
    import redis
    from django.conf import settings

    from ragmux.core.signin import PREFIX

    with redis.Redis.from_url(settings.REDIS_URL) as client:
        keys = list(client.scan_iter(f"{PREFIX}:*"))
        if keys:
            client.delete(*keys)


@contextmanager
def _redis_at(url: str):
    """Redis, as this process reaches it (the shared client and Celery's broker), is ``url`` for
    the block; the suite's own Redis keeps serving every other test."""
    from django.test import override_settings

    from ragmux.celery import app
    from ragmux.core.redis import redis_outage, shared_redis

    def point_at(target: str) -> None:
        app.conf.broker_url = target
        # Celery keeps its connection and producer pools for the life of the process.
        app._pool = None
        app.amqp._producer_pool = None
        shared_redis.cache_clear()

    working = app.conf.broker_url
    with override_settings(REDIS_URL=url):
        point_at(url)
        try:
            yield url
        finally:
            point_at(working)
            redis_outage.succeeded()


@pytest.fixture
def redis_unreachable():
    """Redis refuses connections: a closed port on loopback."""
    from ragmux.launch.embedded import free_port

    with _redis_at(f"redis://127.0.0.1:{free_port()}/0") as url:
        yield url


@pytest.fixture
def redis_hung():
    """Redis accepts connections and never answers, as a stopped (SIGSTOP) server does: a
    listening socket nobody accepts on. Closing it at the end resets what still waits on it."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    try:
        with _redis_at(f"redis://127.0.0.1:{listener.getsockname()[1]}/0") as url:
            yield url
    finally:
        listener.close()


@pytest.fixture
def personas(db) -> dict:
    """One user per role, plus an outsider: signed in, but in no role."""
    from tests.factories import UserFactory

    return {name: UserFactory(username=name, role=None if name == "outsider" else name) for name in PERSONAS}


@pytest.fixture
def metrics_on(settings):
    """`/metrics` served on the public port for the suite's token (it is off unless enabled)."""
    from tests.helpers import METRICS_TOKEN

    settings.METRICS_ENABLED = True
    settings.METRICS_TOKEN = METRICS_TOKEN
    settings.METRICS_LISTEN = None


@pytest.fixture
def api(personas):
    """``api("editor")`` is an HTTP client signed in as that persona; ``api()`` has no credentials.
    It is answered in this process, inside the test's transaction (`tests.helpers.api_client`)."""
    from ragmux.core.authentication import issue_admin_token
    from tests.helpers import api_client

    clients: list[httpx.Client] = []

    def client(persona: str | None = None) -> httpx.Client:
        headers = {}
        if persona is not None:
            headers["Authorization"] = f"Bearer {issue_admin_token(user=personas[persona])}"
        http = api_client(headers=headers)
        clients.append(http)
        return http

    yield client
    for http in clients:
        http.close()


@pytest.fixture(scope="session")
def asgi_url(django_db_setup, django_db_blocker) -> str:
    """The app under uvicorn, in this process (so the test database and `settings` overrides
    apply): `/v1` is served the way production serves it, async views and all."""
    from ragmux.core import asyncdb
    from ragmux.core.bodies import BodyCappedASGIHandler
    from ragmux.launch.embedded import free_port

    config = uvicorn.Config(
        BodyCappedASGIHandler(), host="127.0.0.1", port=free_port(), lifespan="off", log_level="warning"
    )
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    with django_db_blocker.unblock():
        thread.start()
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{config.port}"
        # The async key lookups' connections would keep the test database from being dropped.
        asyncio.run_coroutine_threadsafe(asyncdb.close(), loop).result(timeout=10)
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def v1(asgi_url, transactional_db):
    """``v1(key)`` is an HTTP client for /v1 sending that key."""
    clients: list[httpx.Client] = []

    def client(key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        http = httpx.Client(base_url=f"{asgi_url}/v1", headers=headers, timeout=30)
        clients.append(http)
        return http

    yield client
    for http in clients:
        http.close()
    # Rows still being written would race the database flush that ends the test.
    from gateway.clients.ledger import pending_writes

    deadline = time.monotonic() + 5
    while pending_writes() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def fake_upstream():
    upstream = FakeUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def subprocess_env(db) -> dict[str, str]:
    """The environment for a child process that must use the test database."""
    from django.db import connection

    env = dict(os.environ)
    env["DATABASE_URL"] = env["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
    empty_the_broker()
    return env


def empty_the_broker() -> None:
    """Drops the messages earlier tests sent with no worker to take them: a worker this test
    starts would take those first, and a stale wake-up claims this test's documents under
    another request's id (or none)."""
    from django.conf import settings

    from ragmux.celery import app

    with app.connection_for_write() as broker:
        for queue in (settings.CELERY_TASK_DEFAULT_QUEUE, settings.EVALUATION_QUEUE):
            broker.default_channel.queue_purge(queue)


@pytest.fixture(autouse=True)
def _drop_embedding_tables(request):
    """Django's flush after a transactional test cannot truncate `chunks` while the
    per-width embedding tables (created outside the ORM) reference it, so they go first."""
    marker = request.node.get_closest_marker("django_db")
    transactional = bool(marker and (marker.kwargs.get("transaction") or (marker.args and marker.args[0])))
    if not (transactional or {"transactional_db", "live_server"} & set(request.fixturenames)):
        yield
        return
    request.getfixturevalue("transactional_db")
    yield
    from django.db import connection

    from stores.vector_tables import existing_widths, table_name

    with connection.cursor() as cursor:
        for width in existing_widths():
            cursor.execute(f"DROP TABLE IF EXISTS {table_name(width)} CASCADE")


@pytest.fixture
def local_connection(db):
    """The embedded default's `local` embedding connection."""
    from gateway.connections.services import connection_create

    return connection_create(
        name="local", provider_type="local", base_url="", model_name="all-MiniLM-L6-v2", dimensions=None, api_key=""
    )


@pytest.fixture
def fake_connection(db, fake_upstream):
    """An OpenAI-compatible embedding connection answered by the fake upstream."""
    from gateway.connections.services import connection_create

    return connection_create(
        name="fake-openai",
        provider_type="openai",
        base_url=f"{fake_upstream.url}/v1",
        model_name="text-embedding-3-small",
        dimensions=None,
        api_key="sk-fake-key-000000000000",
    )


@pytest.fixture
def chat_connection(db, fake_upstream):
    """An OpenAI chat connection answered by the fake upstream."""
    from gateway.connections.services import connection_create

    return connection_create(
        name="fake-chat",
        provider_type="openai",
        base_url=f"{fake_upstream.url}/v1",
        model_name="gpt-4o-mini",
        dimensions=None,
        api_key="sk-fake-chat-key-0000000000",
    )


@pytest.fixture
def rerank_connection(db, fake_upstream):
    """``rerank_connection("cohere_rerank")`` is a connection of that rerank type, named after its
    backend ("cohere"), answered by the fake upstream (tests.fakes.rerank)."""
    from gateway.connections.services import connection_create

    models = {"cohere_rerank": "rerank-v3.5", "voyage_rerank": "rerank-2.5"}

    def create(provider_type: str):
        return connection_create(
            name=provider_type.removesuffix("_rerank"),
            provider_type=provider_type,
            base_url=fake_upstream.url,
            model_name=models[provider_type],
            dimensions=None,
            api_key="sk-rerank-key-0123456789",
        )

    return create


@pytest.fixture
def processes(subprocess_env, tmp_path):
    """Real `ragmux worker` / `ragmux scheduler` processes (tests.helpers.Processes) on the test
    database, with short leases and sweeps; whatever a test started is stopped after it."""
    from tests.helpers import Processes

    env = {
        **subprocess_env,
        "INGEST_LEASE": "3s",
        "EVALUATION_RUN_LEASE": "3s",
        "INGEST_REQUEUE_INTERVAL": "1s",
        "INGEST_WORKERS": "1",
        "RAGMUX_DATA_DIR": str(tmp_path),
    }
    running = Processes(env)
    yield running
    running.stop_all()


@pytest.fixture
def ingest_now():
    """Runs ingestion in this process until the queue is empty: the worker's own code,
    without a worker. Tests of the worker processes themselves start real ones."""
    from ingestion.tasks import drain_queue

    def drain() -> None:
        drain_queue()

    return drain


CHROMIUM = "/usr/bin/chromium"
# Without these, Chromium keeps reaching for Google's services, which this network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium, headless, driven by Playwright (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make
    # themselves are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    yield context.new_page()
    context.close()


@pytest.fixture
def falcon_store(fake_connection, ingest_now):
    """A store holding one handbook with a planted fact, so a call grounded in it has a source."""
    from ingestion.services import IncomingFile, document_upload
    from stores.services import store_create
    from tests.helpers import PLANTED_FACT

    store = store_create(name="falcon", values={"embedding_connection_id": fake_connection.id, "top_k": 3})
    document = f"# Handbook\n\n## Launch procedures\n\n{PLANTED_FACT}"
    assert document_upload(store=store, files=[IncomingFile("handbook.md", document.encode())]).refusal is None
    ingest_now()
    return store


# Three documents, each answering one question by its words alone (a lexical search finds it first).
EVALUATED_DOCUMENTS = {
    "pasta.md": "# Pasta\n\nBoil the spaghetti in salted water for nine minutes.",
    "bikes.md": "# Bicycles\n\nOil the chain of the bicycle every month.",
    "taxes.md": "# Taxes\n\nFile the income tax return before April.",
}


@pytest.fixture
def evaluated_store(fake_connection, fake_upstream, ingest_now):
    """A store of three ingested documents (one per subject), searched lexically by default."""
    from ingestion.services import IncomingFile, document_upload
    from stores.services import store_create

    store = store_create(
        name="kb", values={"embedding_connection_id": fake_connection.id, "search_mode": "lexical", "top_k": 3}
    )
    files = [IncomingFile(filename=name, data=text.encode()) for name, text in EVALUATED_DOCUMENTS.items()]
    assert document_upload(store=store, files=files).refusal is None
    ingest_now()
    fake_upstream.forget_requests()
    return store


@pytest.fixture
def documents(evaluated_store) -> dict[str, int]:
    """File name stem → document id."""
    from stores.models import Document

    return {
        filename.removesuffix(".md"): pk
        for pk, filename in Document.objects.filter(store=evaluated_store).values_list("pk", "filename")
    }


@pytest.fixture
def evaluation_set(evaluated_store, documents, personas):
    """Three questions: two answered by their documents' words, one whose document shares none."""
    from retrieval.evaluation.services import evaluation_set_create

    return evaluation_set_create(
        store=evaluated_store,
        name="basics",
        questions=[
            {"text": "how long to boil spaghetti", "judgements": [{"document_id": documents["pasta"], "grade": 2}]},
            {"text": "bicycle chain oil", "judgements": [{"document_id": documents["bikes"], "grade": 1}]},
            {"text": "quantum chromodynamics", "judgements": [{"document_id": documents["taxes"], "grade": 1}]},
        ],
        actor=personas["admin"],
    )
