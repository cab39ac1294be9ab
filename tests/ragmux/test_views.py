"""The health probes: `/readyz` answers within a second whatever is down or hanging, and only the
database takes a web process out of rotation; `/healthz` never depends on either."""

from __future__ import annotations

import time

import pytest

from ragmux.launch.embedded import free_port
from tests.fakes.tcp_proxy import TcpProxy

# READY_CHECK_SECONDS, with room for a loaded machine.
ANSWER_BOUND = 1.5


@pytest.fixture
def proxy():
    """A server that refuses or hangs, as each test makes it (it forwards to nothing that answers)."""
    proxy = TcpProxy(free_port()).start()
    yield proxy
    proxy.stop()


def timed_get(client, path: str):
    started = time.monotonic()
    response = client.get(path)
    return response, time.monotonic() - started


@pytest.mark.parametrize("failure", ["refuse", "hang"])
def test_readyz_says_503_within_a_second_without_the_database(api, proxy, failure, monkeypatch):
    from django.db import connection

    getattr(proxy, failure)()
    # New connections (the probe's own) go to the proxy; the test's own connection stays open.
    monkeypatch.setitem(connection.settings_dict, "PORT", str(proxy.port))
    response, seconds = timed_get(api(), "/readyz")
    assert response.status_code == 503
    assert response.json()["ready"] is False
    assert seconds < ANSWER_BOUND
    assert api().get("/healthz").status_code == 200


@pytest.mark.parametrize("failure", ["refuse", "hang"])
def test_readyz_stays_ready_without_redis_and_says_it_is_degraded(api, proxy, failure):
    from django.test import override_settings

    getattr(proxy, failure)()
    # Not the `settings` fixture: the suite's own Redis must be back before the test's teardown.
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{proxy.port}/0"):
        response, seconds = timed_get(api(), "/readyz")
    assert response.status_code == 200
    assert response.json() == {"ready": True, "degraded": ["redis"]}
    assert seconds < ANSWER_BOUND


def test_the_probes_answer_by_address_whatever_allowed_hosts_lists(api, settings):
    """`ragmux serve` waits for `/healthz` on 127.0.0.1, and orchestrators probe a process by its
    address: a production ALLOWED_HOSTS that names only the public host must not fail them."""
    settings.ALLOWED_HOSTS = ["ragmux.example.com"]
    client = api()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/admin/login/").status_code == 400
