"""The Anthropic adapter's translation, without a network: OpenAI requests as Messages API
requests, and Messages replies and events as OpenAI completions and chunks."""

from __future__ import annotations

import pytest

from gateway.connections.providers.chat_anthropic import DEFAULT_MAX_TOKENS, AnthropicChat
from ragmux.core.errors import ServiceError
from tests.helpers import client_error, sse, translated_stream

PIXEL = "iVBORw0KGgo="  # base64 of a PNG signature
USER = {"role": "user", "content": "hi"}


def provider() -> AnthropicChat:
    return AnthropicChat(base_url="https://upstream.test", api_key="sk-ant-secret-0123456789", model="claude-x")


def payload(**body) -> dict:
    return provider()._payload({"messages": [USER], **body}, stream=False)


@pytest.mark.parametrize(
    ("messages", "system", "turns"),
    [
        # System and developer texts become the one system string.
        (
            [{"role": "system", "content": "be brief"}, {"role": "developer", "content": "be kind"}, USER],
            "be brief\n\nbe kind",
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        ),
        # A cache marker keeps the system in block form.
        (
            [
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "long", "cache_control": {"type": "ephemeral"}}],
                },
                USER,
            ],
            [{"type": "text", "text": "long", "cache_control": {"type": "ephemeral"}}],
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        ),
        # Images: inline data as base64, a remote one by its URL.
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                        {"type": "image_url", "image_url": {"url": "https://img.test/cat.png"}},
                    ],
                }
            ],
            None,
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
                        {"type": "image", "source": {"type": "url", "url": "https://img.test/cat.png"}},
                    ],
                }
            ],
        ),
        # A tool call and its parallel results: results travel together in one user turn.
        (
            [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}},
                        {"id": "call_2", "type": "function", "function": {"name": "b", "arguments": "not json"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "one"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "two"}]},
            ],
            None,
            [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "call_1", "name": "a", "input": {"x": 1}},
                        {"type": "tool_use", "id": "call_2", "name": "b", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "one"},
                        {"type": "tool_result", "tool_use_id": "call_2", "content": "two"},
                    ],
                },
            ],
        ),
        # Empty turns are left out, and what remains of one role is one turn.
        (
            [USER, {"role": "assistant", "content": ""}, {"role": "user", "content": "again"}],
            None,
            [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}]}],
        ),
    ],
)
def test_messages_become_a_system_and_alternating_turns(messages, system, turns):
    sent = provider()._payload({"messages": messages}, stream=True)
    assert sent["messages"] == turns
    assert sent.get("system") == system
    assert (sent["model"], sent["stream"]) == ("claude-x", True)


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {"max_tokens": DEFAULT_MAX_TOKENS}),
        ({"max_tokens": 50}, {"max_tokens": 50}),
        ({"max_completion_tokens": 70, "max_tokens": 50}, {"max_tokens": 70}),
        ({"temperature": 0, "top_p": 0.5}, {"temperature": 0, "top_p": 0.5}),
        ({"stop": "END"}, {"stop_sequences": ["END"]}),
        ({"stop": ["a", "b"]}, {"stop_sequences": ["a", "b"]}),
    ],
)
def test_sampling_fields_take_anthropics_names(body, fields):
    sent = payload(**body)
    assert {name: sent.get(name) for name in fields} == fields
    assert "stop" not in sent and "max_completion_tokens" not in sent


TOOL = {"type": "function", "function": {"name": "lookup", "description": "finds", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("extra", "tool_choice"),
    [
        ({}, None),
        ({"tool_choice": "auto"}, {"type": "auto"}),
        ({"tool_choice": "required"}, {"type": "any"}),
        ({"tool_choice": "none"}, {"type": "none"}),
        ({"tool_choice": {"type": "function", "function": {"name": "lookup"}}}, {"type": "tool", "name": "lookup"}),
        ({"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
        (
            {"tool_choice": "required", "parallel_tool_calls": False},
            {"type": "any", "disable_parallel_tool_use": True},
        ),
    ],
)
def test_tools_and_tool_choice(extra, tool_choice):
    sent = payload(tools=[TOOL, {"type": "function", "function": {"name": "bare"}}], **extra)
    assert sent["tools"] == [
        {"name": "lookup", "description": "finds", "input_schema": {"type": "object"}},
        {"name": "bare", "description": "", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert sent.get("tool_choice") == tool_choice


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": [{"role": "critic", "content": "x"}]}, "messages[0].role 'critic' is not supported"),
        (
            {
                "messages": [
                    {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://i.test/a"}}]}
                ]
            },
            "messages[0] may only hold text",
        ),
        ({"messages": [USER], "tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice must be"),
        ({"messages": [USER], "max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"messages": [USER], "temperature": "hot"}, "temperature must be a number"),
        ({"messages": [USER], "stop": [1]}, "stop must be a string or a list of strings"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,raw"}}]}
                ]
            },
            "must be base64-encoded",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": f"data:text/plain;base64,{PIXEL}"}}],
                    }
                ]
            },
            "image/* media type",
        ),
    ],
)
def test_requests_anthropic_cannot_take_are_the_clients_400(body, message):
    with pytest.raises(ServiceError) as raised:
        provider()._payload(body, stream=False)
    assert client_error(raised.value) == (400, "invalid_request_error", "invalid_request")
    assert message in raised.value.message


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        (None, "stop"),
    ],
)
def test_a_reply_becomes_a_completion(stop_reason, finish):
    reply = {
        "id": "msg_1",
        "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "Hello "},
            {"type": "text", "text": "there"},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}},
        ],
        "stop_reason": stop_reason,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 5,
            "cache_read_input_tokens": 20,
            "output_tokens": 7,
        },
    }
    completion = provider()._completion(reply)
    assert (completion["id"], completion["object"], completion["model"]) == ("msg_1", "chat.completion", "claude-x")
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello there",
                "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
                ],
            },
            "finish_reason": finish,
            "logprobs": None,
        }
    ]
    # Cached and cache-written tokens are part of the prompt, as OpenAI counts it.
    assert completion["usage"] == {
        "prompt_tokens": 35,
        "completion_tokens": 7,
        "total_tokens": 42,
        "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 5},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_a_reply_of_tool_calls_only_has_no_content():
    reply = {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": None}], "usage": {"output_tokens": "x"}}
    message = provider()._completion(reply)["choices"][0]["message"]
    assert message["content"] is None and message["tool_calls"][0]["function"]["arguments"] == "{}"


def test_a_reply_without_content_blocks_is_malformed():
    with pytest.raises(ServiceError) as raised:
        provider()._completion({"content": "text"})
    assert client_error(raised.value) == (502, "upstream_error", "upstream_malformed")


EVENTS = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_9",
            "usage": {
                "input_tokens": 12,
                "cache_read_input_tokens": 20,
                "cache_creation_input_tokens": 5,
                "output_tokens": 1,
            },
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_7", "name": "f"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a":'}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]


def test_a_stream_becomes_chunks_ending_with_the_finish_and_the_usage():
    chunks = translated_stream(provider(), sse(*EVENTS))
    assert {chunk["id"] for chunk in chunks} == {"msg_9"}
    assert [chunk["choices"][0]["delta"] if chunk["choices"] else None for chunk in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
        {"tool_calls": [{"index": 0, "id": "toolu_7", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
        {},
        None,
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # The last counts replace those of message_start; the cache counts come with message_start only.
    usage = chunks[-1]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (12 + 20 + 5, 9)
    assert usage["prompt_tokens_details"] == {"cached_tokens": 20, "cache_write_tokens": 5}


def test_a_stream_that_ends_before_message_stop_is_truncated():
    with pytest.raises(ServiceError) as raised:
        translated_stream(provider(), sse(*EVENTS[:-1]))
    assert client_error(raised.value) == (502, "upstream_error", "upstream_truncated")


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (529, {"type": "overloaded_error", "message": "busy"}, (503, "upstream_error", "overloaded_error")),
        (401, {"type": "authentication_error", "message": "x"}, (401, "authentication_error", "authentication_error")),
        (
            400,
            {"type": "invalid_request_error", "message": "x"},
            (400, "invalid_request_error", "invalid_request_error"),
        ),
        (429, None, (429, "rate_limit_error", None)),
    ],
)
def test_upstream_errors_map_to_what_a_client_sdk_understands(status, error, expected):
    assert provider()._classify(status, error) == expected
