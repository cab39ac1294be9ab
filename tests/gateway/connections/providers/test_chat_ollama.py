"""The Ollama adapter's translation, without a network: OpenAI requests as ``/api/chat``
requests, and Ollama replies and NDJSON lines as OpenAI completions and chunks."""

from __future__ import annotations

import json

import pytest

from gateway.connections.providers.chat_ollama import OllamaChat
from ragmux.core.errors import ServiceError
from tests.helpers import client_error, translated_stream

PIXEL = "iVBORw0KGgo="
USER = {"role": "user", "content": "hi"}


def provider() -> OllamaChat:
    return OllamaChat(base_url="http://ollama.test:11434", api_key="", model="llama-x")


def payload(**body) -> dict:
    return provider()._payload({"messages": [USER], **body}, stream=False)


def ndjson(*lines: dict) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def test_messages_keep_openais_shape_with_images_and_tool_names():
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                {"type": "text", "text": "this?"},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "look", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
        {"role": "tool", "tool_call_id": "call_gone", "content": "orphan"},
    ]
    assert provider()._payload({"messages": messages}, stream=True) == {
        "model": "llama-x",
        "stream": True,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "what is\nthis?", "images": [PIXEL]},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "look", "arguments": {"a": 1}}}]},
            {"role": "tool", "content": "a cat", "tool_name": "look"},
            {"role": "tool", "content": "orphan"},
        ],
    }


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {}),
        (
            {"temperature": 0.1, "top_p": 0.9, "seed": 7, "max_completion_tokens": 30, "stop": ["x"]},
            {"options": {"temperature": 0.1, "top_p": 0.9, "seed": 7, "num_predict": 30, "stop": ["x"]}},
        ),
        # The client's own Ollama options are kept; the OpenAI fields win over them.
        ({"options": {"num_ctx": 2048, "seed": 1}, "seed": 2}, {"options": {"num_ctx": 2048, "seed": 2}}),
        ({"response_format": {"type": "json_object"}}, {"format": "json"}),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}, {"format": SCHEMA}),
        ({"keep_alive": "5m", "think": True}, {"keep_alive": "5m", "think": True}),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}]},
            {"tools": [{"type": "function", "function": {"name": "f"}}]},
        ),
    ],
)
def test_request_fields_take_ollamas_places(body, fields):
    sent = payload(**body)
    extra = {name: value for name, value in sent.items() if name not in ("model", "messages", "stream")}
    assert extra == fields


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": [{"role": "critic", "content": "x"}]}, "messages[0].role 'critic' is not supported"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://i.test/a"}}]}
                ]
            },
            "ollama takes images inline only",
        ),
        ({"messages": [{"role": "user", "content": 42}]}, "messages[0].content must be a string or a list of parts"),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "parts of type 'audio' are not supported"),
        (
            {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}]},
            "must name a function",
        ),
        ({"messages": [USER], "top_p": True}, "top_p must be a number"),
    ],
)
def test_requests_ollama_cannot_take_are_the_clients_400(body, message):
    with pytest.raises(ServiceError) as raised:
        provider()._payload(body, stream=False)
    assert client_error(raised.value) == (400, "invalid_request_error", "invalid_request")
    assert message in raised.value.message


@pytest.mark.parametrize(
    ("reply", "content", "calls", "finish"),
    [
        ({"message": {"content": "Hi"}, "done_reason": "stop"}, "Hi", [], "stop"),
        ({"message": {"content": "Hi"}, "done_reason": "length"}, "Hi", [], "length"),
        (
            {
                "message": {
                    "content": "",
                    "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}, {"bad": 1}],
                }
            },
            None,
            [("f", '{"x": 1}')],
            "tool_calls",
        ),
    ],
)
def test_a_reply_becomes_a_completion(reply, content, calls, finish):
    completion = provider()._completion({**reply, "prompt_eval_count": 11, "eval_count": 4})
    [choice] = completion["choices"]
    assert choice["message"]["content"] == content
    found = choice["message"].get("tool_calls", [])
    # Ollama's calls have no ids: each gets one.
    assert all(call["id"].startswith("call_") for call in found)
    assert [(call["function"]["name"], call["function"]["arguments"]) for call in found] == calls
    assert choice["finish_reason"] == finish
    assert (completion["model"], completion["usage"]["prompt_tokens"], completion["usage"]["total_tokens"]) == (
        "llama-x",
        11,
        15,
    )


@pytest.mark.parametrize("counts", [{}, {"prompt_eval_count": -3, "eval_count": True}])
def test_counts_that_are_not_counts_are_none(counts):
    usage = provider()._completion({"message": {"content": "x"}, **counts})["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (0, 0)


def test_a_reply_without_a_message_is_malformed():
    with pytest.raises(ServiceError) as raised:
        provider()._completion({"response": "text"})
    assert client_error(raised.value) == (502, "upstream_error", "upstream_malformed")


def test_a_stream_of_lines_becomes_chunks_ending_with_the_finish_and_the_usage():
    wire = ndjson(
        {"message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"message": {"content": "lo"}, "done": False},
        {"message": {"content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}, "done": False},
        {"message": {"content": ""}, "done": True, "done_reason": "stop", "prompt_eval_count": 8, "eval_count": 3},
    )
    chunks = translated_stream(provider(), b"\n" + wire)
    deltas = [chunk["choices"][0]["delta"] if chunk["choices"] else None for chunk in chunks]
    assert deltas[:3] == [{"role": "assistant", "content": ""}, {"content": "Hel"}, {"content": "lo"}]
    assert deltas[3]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert deltas[4:] == [{}, None]
    assert chunks[4]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["total_tokens"] == 11


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (ndjson({"message": {"content": "Hel"}, "done": False}), (502, "upstream_error", "upstream_truncated")),
        (b"{broken\n", (502, "upstream_error", "upstream_malformed")),
        (ndjson({"error": "model not found"}), (502, "upstream_error", "upstream_error")),
    ],
)
def test_a_broken_stream_fails(wire, expected):
    with pytest.raises(ServiceError) as raised:
        translated_stream(provider(), wire)
    assert client_error(raised.value) == expected


@pytest.mark.parametrize(
    ("status", "type_"), [(404, "not_found_error"), (400, "invalid_request_error"), (500, "upstream_error")]
)
def test_upstream_errors_take_the_type_of_their_status(status, type_):
    error = provider()._refusal(status, b'{"error": "model \\"x\\" not found"}', {})
    assert client_error(error) == (status, type_, None)
    assert error.message == f'ollama answered HTTP {status}: model "x" not found'
