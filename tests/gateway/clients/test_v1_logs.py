"""A /v1 call under the ASGI server, as its log lines tell it: each carries the call's request id,
and its access line names the project, once the stream has ended."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from ragmux.core import logs


@pytest.fixture
def json_log():
    """``json_log()`` is the lines logged meanwhile, as LOG_FORMAT=json writes them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)


@pytest.mark.parametrize("store_cannot_embed", ["provider cannot embed"], indirect=True)
def test_a_streamed_chat_logs_with_its_request_id_and_its_project(
    v1, project_key, project, store_cannot_embed, json_log
):
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "What is Falcon?"}]}
    with v1(project_key).stream("POST", "/chat/completions", json=body) as response:
        assert response.status_code == 200
        response.read()
    request_id = response.headers["X-Request-Id"]
    deadline = time.monotonic() + 5
    while not any(line["logger"] == "ragmux.access" for line in json_log()) and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [line for line in json_log() if line["request_id"] == request_id]
    # Logged by the view on the event loop, through the context the middleware set.
    assert any(line["message"].startswith(f"project {project.pk} answers without context") for line in lines)
    (access,) = [line for line in lines if line["logger"] == "ragmux.access"]
    assert access["endpoint"] == "v1/chat/completions" and access["status"] == 200
    assert access["project_id"] == project.pk and access["api_key_id"] and access["user"] is None
