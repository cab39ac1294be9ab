"""A client that gives up before the first byte: its upstream call is ended, and the call is still
logged (status 499, with the usage it is known or estimated to have spent) and counted."""

from __future__ import annotations

import json
import re
import socket
import time
from decimal import Decimal

import pytest

from tests.helpers import scrape, wait_for_logs

pytestmark = pytest.mark.usefixtures("metrics_on")

MESSAGES = [{"role": "user", "content": "What is the launch code for Project Falcon?"}]
# What a call is: (its endpoint, the upstream route it waits on, its path and body).
ABANDONED = {
    "chat": ("chat", "openai.chat", "/v1/chat/completions", {"messages": MESSAGES}),
    "chat stream": ("chat", "openai.chat", "/v1/chat/completions", {"messages": MESSAGES, "stream": True}),
    "embeddings": ("embeddings", "openai.embeddings", "/v1/embeddings", {"input": ["falcon launch", "amber code"]}),
    "retrieve": ("retrieve", "openai.embeddings", "/v1/retrieve", {"query": "launch code"}),
}


def client_closed_count(asgi_url: str, endpoint: str) -> tuple[float, float]:
    """The `/metrics` counts of the endpoint's calls whose client went away (0 before the first):
    as logged (status 499) and as disconnects."""
    text = scrape(asgi_url)
    labels = rf'\{{(?=[^}}]*endpoint="{endpoint}")(?=[^}}]*status="499")[^}}]*\}}'
    logged = re.search(rf"^ragmux_v1_requests_total{labels} (\S+)$", text, re.MULTILINE)
    left = re.search(rf'^ragmux_gateway_client_disconnects_total{{endpoint="{endpoint}"}} (\S+)$', text, re.MULTILINE)
    return tuple(float(match.group(1)) if match else 0.0 for match in (logged, left))


def abandon(asgi_url: str, key: str, path: str, body: dict, *, once_upstream_has, route: str) -> None:
    """Sends the call over a socket of its own and closes it once the upstream has the request,
    before any byte of the answer."""
    host, port = asgi_url.removeprefix("http://").split(":")
    content = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(content)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(head.encode() + content)
        deadline = time.monotonic() + 10
        while once_upstream_has.calls(route) == 0:
            assert time.monotonic() < deadline, "the call never reached the upstream"
            time.sleep(0.02)
        client.setblocking(False)
        with pytest.raises(BlockingIOError):
            client.recv(1)  # nothing answered yet


@pytest.mark.parametrize("call", ABANDONED)
def test_a_client_that_leaves_before_the_first_byte_ends_the_upstream_call_and_is_logged(
    v1, asgi_url, project, project_key, fake_upstream, call
):
    from gateway.clients.ledger import flush
    from gateway.clients.models import RequestLog
    from gateway.connections.models import ModelPrice

    # Prices high enough that a few estimated tokens cost whole micro-dollars.
    ModelPrice.objects.filter(model__in=("gpt-4o-mini", "text-embedding-3-small")).update(input_per_mtok=Decimal(1000))
    endpoint, route, path, body = ABANDONED[call]
    counted_before = client_closed_count(asgi_url, endpoint)
    fake_upstream.configure(route, latency=10)
    fake_upstream.forget_requests()

    abandon(asgi_url, project_key, path, body, once_upstream_has=fake_upstream, route=route)

    assert fake_upstream.wait_for_disconnects(1), "the upstream call went on after the client left"
    [row] = wait_for_logs(1, project=project, status_code=499)
    assert flush(5)
    assert RequestLog.objects.filter(project=project).count() == 1
    assert (row.endpoint, row.error) == (endpoint, "client closed request")
    assert row.tokens_estimated and row.cost_micros > 0
    if route == "openai.chat":
        assert (row.streamed, row.prompt_tokens > 0, row.completion_tokens) == (call == "chat stream", True, 0)
    else:
        assert row.embedding_tokens > 0
    assert client_closed_count(asgi_url, endpoint) == tuple(count + 1 for count in counted_before)
