"""`/v1` bodies as the production server (`ragmux serve`'s uvicorn command) reads them: a body is
capped while it is read, a chunked one (without a `Content-Length`) too. (Every endpoint and every
hostile body, on the test's own server: `tests/ragmux/test_hostile_inputs.py`.)"""

from __future__ import annotations

import json

import httpx
from django.conf import settings

from tests.helpers import chunked, partial_request, wait_for_logs

MESSAGES = [{"role": "user", "content": "launch code?"}]


def test_the_production_server_refuses_a_chunked_body_over_the_limit_with_a_413(second_web_process, project_key):
    body = json.dumps({"messages": MESSAGES, "padding": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE}).encode()
    response = httpx.post(
        f"{second_web_process.url}/v1/chat/completions",
        content=chunked(body),
        headers={"Authorization": f"Bearer {project_key}", "Content-Type": "application/json"},
        timeout=30,
    )

    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "body_too_large"
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_a_body_declared_over_the_v1_limit_is_refused_before_any_of_it_arrives(v1, asgi_url, project_key, project):
    declared = settings.V1_MAX_BODY_MB * 1024 * 1024 + 1  # under the server-wide cap, over /v1's
    head = (
        f"POST /v1/chat/completions HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer {project_key}\n"
        f"Content-Type: application/json\nContent-Length: {declared}"
    )

    took, status, answer = partial_request(asgi_url, head, b'{"messages": ', wait=10)

    assert status == 413, answer
    assert took < 2
    assert b'"code":"body_too_large"' in answer.replace(b" ", b"")
    [row] = wait_for_logs(1, project=project)
    assert row.status_code == 413
