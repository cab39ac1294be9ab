"""The official `openai` package, pointed at our /v1 with a project key."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.upstream import CHAT_ANSWER
from tests.helpers import wait_for_logs


@pytest.fixture
def sdk(asgi_url, v1, project_key):
    # `v1` for its teardown, which waits for the request log rows.
    client = openai.OpenAI(base_url=f"{asgi_url}/v1", api_key=project_key, max_retries=0, timeout=30)
    yield client
    client.close()


def test_chat_completion(sdk, fake_upstream, project):
    completion = sdk.chat.completions.create(
        model="my-alias", messages=[{"role": "user", "content": "What is the launch code for Project Falcon?"}]
    )
    assert completion.choices[0].message.content == CHAT_ANSWER
    assert completion.model == "my-alias"  # the client's own name, echoed
    sent = fake_upstream.requests_to("openai.chat")[-1].json()
    assert sent["model"] == "gpt-4o-mini"  # the connection's model goes upstream
    assert "stream_options" not in sent
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.streamed, row.model) == ("chat", 200, False, "gpt-4o-mini")
    assert row.prompt_tokens == completion.usage.prompt_tokens > 0
    assert row.completion_tokens == completion.usage.completion_tokens > 0
    assert not row.tokens_estimated
    assert row.rag_hits == 1
    assert [(source["filename"], source["document_id"] > 0) for source in row.sources] == [("handbook.md", True)]


def test_streamed_chat_completion(sdk, fake_upstream, project):
    stream = sdk.chat.completions.create(
        model="my-alias", messages=[{"role": "user", "content": "launch code?"}], stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CHAT_ANSWER
    assert {c.model for c in chunks} == {"my-alias"}
    # The gateway asked for usage for its own log, but the client did not: no usage chunk.
    assert all(c.usage is None for c in chunks)
    assert fake_upstream.requests_to("openai.chat")[-1].json()["stream_options"] == {"include_usage": True}
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, row.streamed, row.tokens_estimated) == (200, True, False)
    assert row.completion_tokens == len(CHAT_ANSWER.split())
    assert row.ttfb_ms is not None and row.ttfb_ms <= row.latency_ms


def test_streamed_usage_reaches_a_client_that_asks(sdk, project):
    stream = sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "launch code?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(CHAT_ANSWER.split())


def test_models_are_listed_and_retrieved(sdk, chat_connection):
    listed = sdk.models.list()
    assert [m.id for m in listed.data] == ["gpt-4o-mini", "text-embedding-3-small"]
    assert listed.data[0].owned_by == "openai"
    assert sdk.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("no-such-model")


def test_embeddings(sdk, fake_upstream, project):
    created = sdk.embeddings.create(model="text-embedding-3-small", input=["alpha", "beta"])
    assert [len(item.embedding) for item in created.data] == [8, 8]
    # The SDK asks for base64 and decodes it; the floats survive the round trip.
    assert created.data[0].embedding == pytest.approx(fake_upstream.embedder("alpha", 8), abs=1e-6)
    as_floats = sdk.embeddings.create(model="x", input="alpha", encoding_format="float")
    assert as_floats.data[0].embedding == pytest.approx(fake_upstream.embedder("alpha", 8), abs=1e-6)
    rows = wait_for_logs(2, project=project, endpoint="embeddings")
    assert [r.embedding_tokens for r in rows] == [2, 1]
