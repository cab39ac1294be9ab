from __future__ import annotations

from contextlib import ExitStack

import pytest

from ragmux.launch.embedded import free_port
from tests.fakes.upstream import FakeUpstream
from tests.helpers import METRICS_ENV, SYSTEM_PROMPT, WebProcess, forget_cooldowns, web_process


@pytest.fixture(params=["provider cannot embed", "key does not decrypt"])
def store_cannot_embed(request, falcon_store) -> str:
    """The falcon store's embedding connection made unable to embed a query, each way it can
    happen after the store was set up: the connection now names a provider that cannot embed, or
    its API key was sealed under another encryption key than this server's."""
    import os

    from gateway.connections.credentials import connection_key_aad
    from gateway.connections.models import ModelConnection
    from ragmux.core.crypto import seal

    connection = falcon_store.embedding_connection
    if request.param == "provider cannot embed":
        change = {"provider_type": "anthropic"}
    else:
        change = {"api_key_sealed": seal(b"sk-other", aad=connection_key_aad(connection.pk), key=os.urandom(32))}
    ModelConnection.objects.filter(pk=connection.pk).update(**change)
    return request.param


@pytest.fixture
def project(chat_connection, fake_connection, falcon_store):
    from gateway.clients.services import project_create

    return project_create(
        name="falcon-bot",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=fake_connection.id,
        store_id=falcon_store.id,
        system_prompt=SYSTEM_PROMPT,
    )


@pytest.fixture
def project_key(project) -> str:
    from gateway.clients.services import key_create

    return key_create(project=project, name="default", scopes=None, expires_at=None).key


@pytest.fixture
def start_web_process(subprocess_env, transactional_db, settings):
    """``start_web_process(env=None)`` starts the production server (`ragmux serve`'s uvicorn
    command, one worker) in a process of its own, on the test database, with ``env`` added to its
    environment; each is stopped at the end."""
    with ExitStack() as started:

        def start(env: dict[str, str] | None = None) -> WebProcess:
            settings.PORT, settings.WEB_WORKERS = free_port(), 1
            # With its metrics on, for the suite's token.
            return started.enter_context(web_process({**subprocess_env, **METRICS_ENV, **(env or {})}))

        yield start


@pytest.fixture
def second_web_process(start_web_process) -> WebProcess:
    """The production server in its own process, beside the test's own."""
    return start_web_process()


@pytest.fixture
def upstreams():
    """Three fake upstreams of their own, one per target of a route."""
    started = [FakeUpstream().start() for _ in range(3)]
    yield started
    for upstream in started:
        upstream.stop()


@pytest.fixture
def fresh_cooldowns():
    """The route cooldowns forgotten after the test, in this process and in Redis."""
    yield
    forget_cooldowns()


@pytest.fixture
def other_project(chat_connection, fake_connection):
    """A second project, with no store of its own."""
    from gateway.clients.services import project_create

    return project_create(
        name="other-bot",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=fake_connection.id,
        store_id=None,
        system_prompt="",
    )


@pytest.fixture
def key_of():
    """``key_of(project, scopes=None)``: a new key of the project (every scope unless given)."""
    from gateway.clients.services import key_create

    def issue(project, scopes: list[str] | None = None) -> str:
        return key_create(project=project, name=f"key {scopes}", scopes=scopes, expires_at=None).key

    return issue


@pytest.fixture
def ingesting(transactional_db):
    """Ingestion running beside the test, in a thread of this process: the queue drained every
    tenth of a second, as a worker woken by each upload would."""
    import threading

    from django.db import connections

    from ingestion.tasks import drain_queue

    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.wait(0.1):
                drain_queue()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=60)
