"""A grounded chat says which of its passages the answer cited (`ragmux.citations`: the `[n]`
markers read back to the passages labelled `[n]`), in the JSON answer and in the stream's last
frame before `[DONE]`; the official `openai` client reads both unchanged."""

from __future__ import annotations

import json

import openai
import pytest

from stores.models import Chunk
from tests.factories import GatewayKeyFactory, ProjectFactory

QUESTION = "What is the launch code for Project Falcon?"
CITING = "The launch code is AMBER-7731 [1]."


@pytest.fixture
def sdk(asgi_url, v1, project_key):
    # `v1` for its teardown, which waits for the request log rows.
    client = openai.OpenAI(base_url=f"{asgi_url}/v1", api_key=project_key, max_retries=0, timeout=30)
    yield client
    client.close()


@pytest.fixture
def handbook_chunk(falcon_store) -> Chunk:
    return Chunk.objects.select_related("document").get(store=falcon_store)


def ask(sdk, **extra):
    return sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}], **extra)


def test_the_answer_carries_the_passages_it_cited(sdk, fake_upstream, handbook_chunk):
    fake_upstream.configure("openai.chat", answer=CITING)
    reply = ask(sdk)

    assert reply.choices[0].message.content == CITING
    assert reply.ragmux == {
        "citations": [
            {
                "marker": 1,
                "document_id": handbook_chunk.document_id,
                "filename": "handbook.md",
                "section": "Handbook > Launch procedures",
                "page": 0,
                "chunk_id": handbook_chunk.pk,
                "index": CITING.index("[1]"),
            }
        ]
    }


@pytest.mark.parametrize(
    "answer",
    ["The launch code is AMBER-7731.", "See [2] and [0].", "Run `codes[1]`."],
    ids=["none", "not ours", "code"],
)
def test_an_answer_citing_none_of_its_passages_has_no_citations(sdk, fake_upstream, answer):
    fake_upstream.configure("openai.chat", answer=answer)
    assert ask(sdk).ragmux == {"citations": []}


def test_citations_join_the_included_context(sdk, fake_upstream):
    fake_upstream.configure("openai.chat", answer=CITING)
    ours = ask(sdk, extra_body={"ragmux": {"include_context": True}}).ragmux

    assert set(ours) == {"sources", "context", "citations"}
    [cited] = ours["citations"]
    assert ours["sources"][0]["chunk_id"] == cited["chunk_id"] and "[1] (handbook.md" in ours["context"]


def test_an_ungrounded_chat_has_no_ragmux_object(v1, fake_upstream, chat_connection):
    fake_upstream.configure("openai.chat", answer=CITING)
    key = GatewayKeyFactory(project=ProjectFactory(name="bare", chat_connection=chat_connection)).secret
    body = v1(key).post("/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]})

    assert body.status_code == 200 and "ragmux" not in body.json()


def test_a_chat_whose_retrieval_failed_has_no_ragmux_object(v1, project_key, fake_upstream):
    fake_upstream.configure("openai.embeddings", status=500)
    fake_upstream.configure("openai.chat", answer=CITING)
    body = v1(project_key).post("/chat/completions", json={"messages": [{"role": "user", "content": QUESTION}]})

    assert body.status_code == 200 and "ragmux" not in body.json()


@pytest.mark.parametrize("usage", [False, True], ids=["plain", "with usage"])
def test_the_streams_last_chunk_carries_the_citations(sdk, fake_upstream, handbook_chunk, usage):
    fake_upstream.configure("openai.chat", answer=CITING)
    options = {"stream_options": {"include_usage": True}} if usage else {}
    chunks = list(ask(sdk, stream=True, **options))

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == CITING
    last = chunks[-1]
    [cited] = last.ragmux["citations"]
    assert (cited["marker"], cited["chunk_id"], cited["index"]) == (1, handbook_chunk.pk, CITING.index("[1]"))
    assert sum(1 for chunk in chunks if getattr(chunk, "ragmux", None)) == 1
    assert (last.model, last.id) == ("m", chunks[0].id)
    if usage:
        # The usage chunk stays the last (OpenAI's place for it), and it alone has no choices.
        assert last.choices == [] and last.usage is not None
        assert [chunk for chunk in chunks if not chunk.choices] == [last]
    else:
        # No chunk without choices: the finishing chunk, held back, carries the citations.
        assert all(chunk.choices for chunk in chunks) and last.choices[0].finish_reason == "stop"


def test_the_clients_stream_helper_reads_the_cited_stream(sdk, fake_upstream):
    fake_upstream.configure("openai.chat", answer=CITING)
    with sdk.chat.completions.stream(model="m", messages=[{"role": "user", "content": QUESTION}]) as stream:
        final = stream.get_final_completion()

    assert final.choices[0].message.content == CITING


def test_a_stream_citing_nothing_ends_with_an_empty_list(v1, project_key):
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    with v1(project_key).stream("POST", "/chat/completions", json=body) as response:
        frames = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]

    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2])["ragmux"] == {"citations": []}
    assert all("ragmux" not in json.loads(frame) for frame in frames[:-2])


def test_a_stream_that_never_says_it_finished_ends_with_a_chunk_of_citations(v1, project_key, fake_upstream):
    fake_upstream.configure("openai.chat", answer=CITING, omit_finish=True)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    with v1(project_key).stream("POST", "/chat/completions", json=body) as response:
        frames = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]

    last = json.loads(frames[-2])
    assert (last["choices"], last["model"]) == ([], "m") and last["ragmux"]["citations"][0]["marker"] == 1
