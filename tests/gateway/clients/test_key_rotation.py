"""A rotated key is dead on its next request in every web process: keys are looked up in the
database on each call, never cached in a process."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from ragmux.embedded import free_port


@pytest.fixture
def second_web_process(subprocess_env, transactional_db):
    """The production app (`ragmux.asgi`) in its own uvicorn process, on the test database."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "ragmux.asgi:application", "--port", str(port), "--lifespan", "off"],
        env=subprocess_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
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
    yield url
    process.terminate()
    process.wait(timeout=15)


def test_a_rotated_key_fails_on_its_next_request_in_every_process(
    api, v1, second_web_process, project, project_key, asgi_url
):
    from gateway.clients.models import GatewayKey

    def models(base: str, key: str) -> httpx.Response:
        return httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)

    for base in (asgi_url, second_web_process):
        assert models(base, project_key).status_code == 200
    key_id = GatewayKey.objects.get(prefix=project_key[:15]).pk
    rotated = api("admin").post(f"/admin/api/keys/{key_id}/rotate")
    assert rotated.status_code == 200
    new_key = rotated.json()["key"]
    assert new_key != project_key and rotated.json()["api_key"]["id"] == key_id
    for base in (asgi_url, second_web_process):
        refused = models(base, project_key)
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "invalid_api_key"
        assert models(base, new_key).status_code == 200
