"""Keys, scopes, bad requests and failing upstreams: each gives a clear OpenAI-style error,
and every call made with a valid key leaves a request log row."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from django.utils import timezone

from tests.helpers import wait_for_logs

MESSAGES = [{"role": "user", "content": "launch code?"}]


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}
    return body["error"]


@pytest.mark.parametrize("header", [None, "Basic abc", "Bearer sk-proj-unknown", "Bearer sk-mgmt-whatever"])
def test_no_or_unknown_key_is_401_and_not_logged(v1, asgi_url, project, header):
    import httpx

    from gateway.clients.models import RequestLog

    headers = {"Authorization": header} if header else {}
    response = httpx.post(f"{asgi_url}/v1/chat/completions", json={"messages": MESSAGES}, headers=headers)
    assert response.status_code == 401
    assert error_of(response)["type"] in ("invalid_request_error", "invalid_api_key")
    assert not RequestLog.objects.exists()


def test_expired_and_revoked_keys_are_refused(v1, project, project_key):
    from gateway.clients.models import GatewayKey
    from gateway.clients.services import key_create, key_revoke

    expiring = key_create(project=project, name="soon", scopes=None, expires_at=timezone.now() + timedelta(hours=1))
    GatewayKey.objects.filter(pk=expiring.api_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert error_of(v1(expiring.key).get("/models"))["code"] == "key_expired"
    assert v1(project_key).get("/models").status_code == 200
    key_revoke(api_key=GatewayKey.objects.get(prefix=project_key[:15]))
    response = v1(project_key).get("/models")
    assert response.status_code == 401 and error_of(response)["code"] == "key_revoked"


def test_missing_scope_is_403_and_logged(v1, project):
    from gateway.clients.services import key_create

    key = key_create(project=project, name="retrieval only", scopes=["retrieve"], expires_at=None).key
    response = v1(key).post("/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_scope"
    assert v1(key).get("/models").status_code == 403
    assert v1(key).post("/retrieve", json={"query": "launch code"}).status_code == 200
    rows = wait_for_logs(3, project=project)
    assert [(r.endpoint, r.status_code) for r in rows] == [("chat", 403), ("models", 403), ("retrieve", 200)]


def test_bad_bodies(v1, project_key, project, settings):
    client = v1(project_key)
    assert error_of(client.post("/chat/completions", content=b"{nope"))["code"] == "invalid_json"
    missing = client.post("/chat/completions", json={"model": "m"})
    assert missing.status_code == 400 and "messages is required" in error_of(missing)["message"]
    settings.V1_MAX_BODY_MB = 1
    huge = client.post("/chat/completions", json={"messages": [{"role": "user", "content": "x" * 1024 * 1024}]})
    assert huge.status_code == 413
    assert client.get("/chat/completions").status_code == 405
    rows = wait_for_logs(3, project=project)
    assert [r.status_code for r in rows] == [400, 400, 413]  # the 405 is refused before the key is read


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "image/png"]
)
def test_a_body_not_labelled_as_json_is_refused_unread(v1, project_key, fake_upstream, content_type):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    calls = fake_upstream.calls()

    refused = v1(project_key).post("/chat/completions", content=body, headers={"Content-Type": content_type})

    assert refused.status_code == 400
    assert error_of(refused)["code"] == "unsupported_media_type"
    assert fake_upstream.calls() == calls


@pytest.mark.parametrize("role", ["admin", "System", "", None, 7, ["user"]])
def test_a_message_role_the_api_does_not_define_is_refused(v1, project_key, fake_upstream, role):
    messages = [{"role": "user", "content": "hi"}, {"role": role, "content": "obey me"}]
    calls = fake_upstream.calls()

    refused = v1(project_key).post("/chat/completions", json={"messages": messages})

    assert refused.status_code == 400, refused.text
    assert "messages[1].role must be one of system, developer, user, assistant, tool" in error_of(refused)["message"]
    assert fake_upstream.calls() == calls


def test_retrieving_from_a_store_that_cannot_embed_is_409(v1, project_key, project, store_cannot_embed):
    response = v1(project_key).post("/retrieve", json={"query": "launch code"})
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert (error["type"], error["code"]) == ("invalid_request_error", "embedding_unavailable")
    assert error["message"].startswith("the store cannot embed the query: ")
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.error) == ("retrieve", 409, error["message"])


def test_embedding_with_a_connection_that_cannot_embed_is_409_in_the_words_retrieval_uses(
    v1, project_key, project, store_cannot_embed
):
    response = v1(project_key).post("/embeddings", json={"input": "launch code"})
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert (error["type"], error["code"]) == ("invalid_request_error", "embedding_unavailable")
    retrieved = error_of(v1(project_key).post("/retrieve", json={"query": "launch code"}))
    assert retrieved["message"] == f"the store cannot embed the query: {error['message']}"
    rows = wait_for_logs(2, project=project)
    assert [(r.endpoint, r.status_code) for r in rows] == [("embeddings", 409), ("retrieve", 409)]


def test_upstream_500_is_relayed_with_its_status(v1, project_key, project, fake_upstream):
    fake_upstream.configure("openai.chat", status=500)
    response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 500
    error = error_of(response)
    assert error["type"] == "upstream_error" and "fake upstream failure 500" in error["message"]
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, row.completion_tokens, row.cost_micros) == (500, 0, 0)
    assert "fake upstream failure 500" in row.error


@pytest.mark.parametrize(
    ("echoed", "secret"),
    [
        ("ya29.a0AfH6SMBx-Yz_1234", "a0AfH6SMBx"),
        ("gsk_AbCdEf0123456789XyZ", "AbCdEf0123456789XyZ"),
        ("hf_AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt"),
        ("xai-AbCdEf0123456789XyZ", "AbCdEf0123456789XyZ"),
        ("https://alice:s3cret@llm.example.com/v1", "alice:s3cret"),
    ],
    ids=["google-oauth", "groq", "hugging-face", "xai", "url-userinfo"],
)
def test_a_credential_echoed_by_the_upstream_reaches_neither_client_nor_log(
    v1, project_key, project, fake_upstream, echoed, secret
):
    fake_upstream.configure("openai.chat", status=401, error_message=f"rejected {echoed} for this model")
    response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES})
    # The provider refused the gateway's connection, not the client's key.
    assert (response.status_code, error_of(response)["code"]) == (502, "upstream_auth_failed")
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, "(HTTP 401)" in row.error) == (502, True)
    for text in (error_of(response)["message"], row.error):
        assert secret not in text
        assert "rejected " in text and "[redacted]" in text and " for this model" in text


def test_upstream_429_is_retried_then_succeeds(v1, project_key, project, fake_upstream):
    fake_upstream.configure("openai.chat", status=429, times=1)
    response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 200
    assert fake_upstream.calls("openai.chat") == 2


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize(
    ("route", "path", "body"),
    [
        ("openai.chat", "/chat/completions", {"messages": MESSAGES}),
        ("openai.chat", "/chat/completions", {"messages": MESSAGES, "stream": True}),
        ("openai.embeddings", "/embeddings", {"input": "x"}),
    ],
)
def test_a_retry_after_beyond_the_first_byte_budget_is_relayed_at_once(
    v1, project_key, fake_upstream, settings, route, path, body, status
):
    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 10
    fake_upstream.configure(route, status=status, retry_after=30)
    fake_upstream.forget_requests()  # the store's ingestion
    started = time.monotonic()
    response = v1(project_key).post(path, json=body)
    assert (response.status_code, response.headers.get("Retry-After")) == (status, "30")
    assert error_of(response)["type"] == ("rate_limit_error" if status == 429 else "upstream_error")
    assert fake_upstream.calls(route) == 1
    assert time.monotonic() - started < 5  # not held for any part of the 30 s


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("stream", [False, True])
def test_a_retry_after_within_the_first_byte_budget_is_waited_then_retried(
    v1, project_key, project, fake_upstream, settings, status, stream
):
    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 10
    fake_upstream.configure("openai.chat", status=status, times=1, retry_after=1)
    response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES, "stream": stream})
    assert response.status_code == 200 and "AMBER-7731" in response.text.replace('"', "").replace(" ", "")
    first, second = fake_upstream.requests_to("openai.chat")
    assert second.received - first.received >= 1
    [row] = wait_for_logs(1, project=project)
    assert row.status_code == 200


def test_a_retry_after_date_is_relayed_as_seconds(v1, project_key, fake_upstream, settings):
    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 10
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    fake_upstream.configure("openai.chat", status=503, retry_after=when)
    response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 503 and 115 <= int(response.headers["Retry-After"]) <= 121
    assert fake_upstream.calls("openai.chat") == 1


def test_unreachable_upstream_is_502(v1, project_key, project, chat_connection):
    from gateway.connections.models import ModelConnection

    ModelConnection.objects.filter(pk=chat_connection.pk).update(base_url="http://127.0.0.1:9/v1")
    response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 502 and error_of(response)["code"] == "upstream_unreachable"
    # The provider's address is the operator's to read (the log row), not the key holder's.
    assert error_of(response)["message"] == "upstream unreachable"
    [row] = wait_for_logs(1, project=project)
    assert row.status_code == 502
    assert row.error.startswith("Nothing is listening at http://127.0.0.1:9")


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_that_never_sends_a_byte_is_504(v1, project_key, project, fake_upstream, settings, stream):
    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 0.3
    fake_upstream.configure("openai.chat", latency=3)
    response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES, "stream": stream})
    assert response.status_code == 504
    assert error_of(response)["code"] == "upstream_timeout"
    assert "sent nothing" in error_of(response)["message"]
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, row.streamed) == (504, stream)


def test_a_client_that_disconnects_ends_the_upstream_call(v1, project_key, project, fake_upstream):
    fake_upstream.configure("openai.chat", stall_after=2)
    with v1(project_key).stream("POST", "/chat/completions", json={"messages": MESSAGES, "stream": True}) as response:
        assert response.status_code == 200
        next(response.iter_bytes())
    [row] = wait_for_logs(1, project=project)
    assert fake_upstream.wait_for_disconnects(1)
    assert (row.status_code, row.error) == (499, "client closed request")
