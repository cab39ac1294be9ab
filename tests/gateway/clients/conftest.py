from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

import httpx
import pytest

from ragmux.launch.embedded import free_port
from tests.helpers import SYSTEM_PROMPT


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


@dataclass
class WebProcess:
    url: str
    process: subprocess.Popen


@pytest.fixture
def start_web_process(subprocess_env, transactional_db, settings):
    """``start_web_process()`` starts the production server (`ragmux serve`'s uvicorn command, one
    worker) in a process of its own, on the test database; each is stopped at the end."""
    from ragmux.launch.cli import web_command

    started: list[WebProcess] = []

    def start() -> WebProcess:
        settings.PORT, settings.WEB_WORKERS = free_port(), 1
        process = subprocess.Popen(web_command(), env=subprocess_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{settings.PORT}"
        started.append(WebProcess(url, process))
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return started[-1]
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the web process did not start: {process.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)

    yield start
    for web in started:
        if web.process.poll() is None:
            web.process.terminate()
            web.process.wait(timeout=30)


@pytest.fixture
def second_web_process(start_web_process) -> WebProcess:
    """The production server in its own process, beside the test's own."""
    return start_web_process()
