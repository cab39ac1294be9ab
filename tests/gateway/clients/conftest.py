from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

import httpx
import pytest

from ragmux.launch.embedded import free_port
from tests.helpers import SYSTEM_PROMPT


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
def second_web_process(subprocess_env, transactional_db, settings):
    """The production server (`ragmux serve`'s uvicorn command, one worker) in its own process, on
    the test database."""
    from ragmux.launch.cli import web_command

    settings.PORT, settings.WEB_WORKERS = free_port(), 1
    process = subprocess.Popen(web_command(), env=subprocess_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{settings.PORT}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the second web process did not start: {process.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    yield WebProcess(url, process)
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=30)
