"""`/v1` bodies as the production server (`ragmux serve`'s uvicorn command) reads them: a body is
capped while it is read, a chunked one (without a `Content-Length`) too. (Every endpoint and every
hostile body, on the test's own server: `tests/ragmux/test_hostile_inputs.py`.)"""

from __future__ import annotations

import json

import httpx
from django.conf import settings

from tests.helpers import chunked

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
