"""A listener of the metrics' own: `/metrics` only, GET or HEAD, for the token when one is set."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from ragmux.launch import metrics_listener
from ragmux.launch.embedded import free_port
from tests.helpers import METRICS_AUTHORIZATION, METRICS_TOKEN


@pytest.fixture
def listening():
    """``listening(token)`` serves a registry with one counter on a free loopback port."""
    servers = []

    def start(token: str | None) -> str:
        registry = CollectorRegistry()
        Counter("ragmux_listener_test", "A counter of the test", registry=registry).inc(3)
        port = free_port()
        servers.append(metrics_listener.start(("127.0.0.1", port), registry, token))
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_listener_serves_its_metrics_for_the_token_only(listening):
    url = listening(METRICS_TOKEN)
    for headers in ({}, {"Authorization": f"Bearer {METRICS_TOKEN[:-1]}"}, {"Authorization": METRICS_TOKEN}):
        refused = httpx.get(f"{url}/metrics", headers=headers)
        assert (refused.status_code, refused.headers["WWW-Authenticate"]) == (401, "Bearer")
        assert "ragmux_listener_test" not in refused.text
    served = httpx.get(f"{url}/metrics", headers=METRICS_AUTHORIZATION)
    assert served.status_code == 200
    assert served.headers["Cache-Control"] == "no-store"
    assert "ragmux_listener_test_total 3.0" in served.text


def test_a_loopback_listener_without_a_token_answers_metrics_only(listening):
    url = listening(None)
    assert "ragmux_listener_test_total 3.0" in httpx.get(f"{url}/metrics").text
    assert httpx.head(f"{url}/metrics").status_code == 200
    assert httpx.get(f"{url}/").status_code == 404
    assert httpx.get(f"{url}/admin/").status_code == 404
    assert httpx.get(f"{url}/metrics/x").status_code == 404
    refused = httpx.post(f"{url}/metrics", content=b"\x00" * 1024)
    assert (refused.status_code, refused.headers["Allow"]) == (405, "GET, HEAD")
