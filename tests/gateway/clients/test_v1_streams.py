"""A streamed chat answer has bounds of its own, not UPSTREAM_TIMEOUT's: a long answer that keeps
coming is relayed to its end, while STREAM_MAX_DURATION, UPSTREAM_IDLE_TIMEOUT (the gap between two
reads once the stream has begun) and STREAM_MAX_BYTES_MB end it with an error frame in OpenAI's
envelope. Each way it ends writes one request log row with what was relayed.

OpenAI's stream (SSE of OpenAI chunks) and Anthropic's (SSE of its own events, translated) are
both run, each against a fake upstream speaking its wire format."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest

from tests.fakes.upstream import CHAT_ANSWER
from tests.helpers import wait_for_logs

MESSAGES = [{"role": "user", "content": "What is the launch code for Project Falcon?"}]
# Each family's base path on the fake, its streamed route and its model. Either fake streams more
# than a dozen chunks, so paced at an interval the answer lasts a known time.
FAMILIES = {
    "openai": ("/v1", "openai.chat", "gpt-4o-mini"),
    "anthropic": ("", "anthropic.messages", "claude-sonnet-4-5"),
}
WORDS = len(CHAT_ANSWER.split())


@dataclass
class Family:
    provider: str
    route: str
    project: object
    key: str


@pytest.fixture(params=sorted(FAMILIES))
def family(request, v1, fake_upstream) -> Family:
    """A project without a store, chatting through one provider family's fake."""
    from gateway.clients.services import key_create, project_create
    from gateway.connections.services import connection_create

    path, route, model = FAMILIES[request.param]
    connection = connection_create(
        name=f"{request.param}-chat",
        provider_type=request.param,
        base_url=f"{fake_upstream.url}{path}",
        model_name=model,
        dimensions=None,
        api_key="sk-fake-stream-key-000000000",
    )
    project = project_create(
        name=f"{request.param}-streams",
        chat_connection_id=connection.id,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
    )
    key = key_create(project=project, name="k", scopes=None, expires_at=None).key
    return Family(request.param, route, project, key)


def stream(v1, family: Family) -> tuple[list[str], float]:
    """The frames of one streamed chat (``data: `` taken off) and the seconds it took."""
    started = time.monotonic()
    response = v1(family.key).post("/chat/completions", json={"messages": MESSAGES, "stream": True})
    assert response.status_code == 200, response.text  # the stream had begun
    frames = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    assert frames[-1] == "[DONE]"
    return frames, time.monotonic() - started


def relayed_text(frames: list[str]) -> str:
    chunks = [json.loads(frame) for frame in frames[:-1]]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


def error_frame(frames: list[str]) -> dict:
    error = json.loads(frames[-2])["error"]
    assert set(error) == {"message", "type", "code"}
    return error


def test_a_stream_longer_than_the_upstream_timeout_is_relayed_to_its_end(v1, family, fake_upstream, settings):
    # Not lower: the first byte must come within it, and a loaded machine's first call is slow.
    settings.UPSTREAM_TIMEOUT = 2
    # Every gap well inside the idle bound, the whole answer half as long again as UPSTREAM_TIMEOUT.
    fake_upstream.configure(family.route, chunk_interval=0.25)
    frames, took = stream(v1, family)
    assert took > 3
    assert all("error" not in json.loads(frame) for frame in frames[:-1])
    assert relayed_text(frames) == CHAT_ANSWER
    [row] = wait_for_logs(1, project=family.project)
    assert (row.status_code, row.streamed, row.error) == (200, True, "")
    assert (row.completion_tokens, row.tokens_estimated) == (WORDS, False)


def test_a_stream_longer_than_its_maximum_duration_ends_with_a_504_timeout_frame(v1, family, fake_upstream, settings):
    settings.STREAM_MAX_DURATION = 1
    fake_upstream.configure(family.route, chunk_interval=0.3)
    frames, took = stream(v1, family)
    assert 1 <= took < 2.5
    error = error_frame(frames)
    assert (error["type"], error["code"]) == ("timeout", "stream_max_duration")
    assert "STREAM_MAX_DURATION (1s)" in error["message"]
    assert CHAT_ANSWER.startswith(relayed_text(frames)) and relayed_text(frames)
    [row] = wait_for_logs(1, project=family.project)
    assert (row.status_code, row.streamed, row.error) == (504, True, error["message"])
    assert row.completion_tokens > 0  # what was relayed, at least estimated


def test_an_upstream_that_goes_silent_mid_stream_is_ended_by_the_idle_bound(v1, family, fake_upstream, settings):
    settings.UPSTREAM_TIMEOUT = 5  # what ended a stalled stream before
    settings.UPSTREAM_IDLE_TIMEOUT = 0.5
    fake_upstream.configure(family.route, stall_after=4)
    frames, took = stream(v1, family)
    assert took < 3
    error = error_frame(frames)
    assert (error["type"], error["code"]) == ("timeout", "upstream_timeout")
    assert "UPSTREAM_IDLE_TIMEOUT" in error["message"]
    assert relayed_text(frames)  # what came before the silence reached the client
    assert fake_upstream.wait_for_disconnects(1)  # and the upstream call was ended
    [row] = wait_for_logs(1, project=family.project)
    assert (row.status_code, row.streamed, row.tokens_estimated) == (504, True, True)
    assert row.completion_tokens > 0


def test_a_stream_larger_than_its_byte_cap_ends_with_a_502_frame(v1, family, fake_upstream, settings):
    # Test-only: the cap is whole MiB from the environment; 1 KiB here so a short answer reaches it.
    settings.STREAM_MAX_BYTES_MB = 1 / 1024
    # Paced, so the first read holds the first chunk alone and the stream begins before the cap.
    fake_upstream.configure(family.route, chunk_interval=0.05)
    frames, _ = stream(v1, family)
    error = error_frame(frames)
    assert (error["type"], error["code"]) == ("upstream_error", "stream_max_bytes")
    assert "STREAM_MAX_BYTES_MB" in error["message"]
    assert CHAT_ANSWER.startswith(relayed_text(frames))
    [row] = wait_for_logs(1, project=family.project)
    assert (row.status_code, row.streamed, row.error) == (502, True, error["message"])
