"""The Gemini adapter's translation, without a network: OpenAI requests as generateContent
requests, and Gemini replies and events as OpenAI completions and chunks."""

from __future__ import annotations

import pytest

from gateway.connections.providers.chat_gemini import GeminiChat, gemini_schema
from ragmux.core.errors import ServiceError
from tests.helpers import client_error, sse, translated_stream

PIXEL = "iVBORw0KGgo="
USER = {"role": "user", "content": "hi"}


def provider(model: str = "gemini-x") -> GeminiChat:
    return GeminiChat(base_url="https://upstream.test/v1beta", api_key="AIza-secret", model=model)


def payload(**body) -> dict:
    return provider()._payload({"messages": [USER], **body}, stream=False)


@pytest.mark.parametrize(
    ("schema", "cut"),
    [
        ("not a schema", {"type": "object"}),
        ({"type": ["string", "null"]}, {"type": "string", "nullable": True}),
        ({"type": ["null"]}, {"type": "string", "nullable": True}),
        ({"const": "on"}, {"enum": ["on"]}),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"anyOf": [{"type": "string"}, {"type": "integer"}]}),
        (
            {"type": "object", "properties": {"when": {"type": "string", "format": "date-time", "$comment": "x"}}},
            {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}},
        ),
        # A format Gemini does not know for the type, and keywords it refuses, are dropped.
        ({"type": "string", "format": "email", "additionalProperties": False}, {"type": "string"}),
        ({"type": "integer", "format": "int64", "minimum": 1}, {"type": "integer", "format": "int64", "minimum": 1}),
        ({"type": "array", "items": {"type": "number", "default": 1}}, {"type": "array", "items": {"type": "number"}}),
    ],
)
def test_schemas_are_cut_down_to_what_gemini_accepts(schema, cut):
    assert gemini_schema(schema) == cut


@pytest.mark.parametrize(
    ("model", "stream", "url"),
    [
        ("gemini-x", False, "https://upstream.test/v1beta/models/gemini-x:generateContent"),
        ("models/gemini-x", True, "https://upstream.test/v1beta/models/gemini-x:streamGenerateContent?alt=sse"),
        ("tuned/a b", False, "https://upstream.test/v1beta/models/tuned%2Fa%20b:generateContent"),
    ],
)
def test_the_model_is_part_of_the_url(model, stream, url):
    assert provider(model)._url(stream=stream) == url


CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}


@pytest.mark.parametrize(
    ("messages", "system", "contents"),
    [
        (
            [{"role": "system", "content": "be brief"}, {"role": "developer", "content": ""}, USER],
            {"parts": [{"text": "be brief"}]},
            [{"role": "user", "parts": [{"text": "hi"}]}],
        ),
        # Calls go as functionCall parts of a model turn; results are matched by the function's name.
        (
            [
                USER,
                {"role": "assistant", "content": "let me look", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"found": 3}'},
                {"role": "tool", "tool_call_id": "call_1", "content": "plain text"},
                {"role": "tool", "tool_call_id": "call_unknown", "content": "dropped"},
            ],
            None,
            [
                {"role": "user", "parts": [{"text": "hi"}]},
                {
                    "role": "model",
                    "parts": [{"text": "let me look"}, {"functionCall": {"name": "lookup", "args": {"q": "x"}}}],
                },
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": "lookup", "response": {"found": 3}}},
                        {"functionResponse": {"name": "lookup", "response": {"result": "plain text"}}},
                    ],
                },
            ],
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                        {"type": "image_url", "image_url": "gs://bucket/cat.png"},
                    ],
                }
            ],
            None,
            [
                {
                    "role": "user",
                    "parts": [
                        {"text": "see"},
                        {"inlineData": {"mimeType": "image/png", "data": PIXEL}},
                        {"fileData": {"fileUri": "gs://bucket/cat.png"}},
                    ],
                }
            ],
        ),
    ],
)
def test_messages_become_contents_and_a_system_instruction(messages, system, contents):
    sent = provider()._payload({"messages": messages}, stream=True)
    assert sent["contents"] == contents
    assert sent.get("systemInstruction") == system


@pytest.mark.parametrize(
    ("body", "config"),
    [
        ({}, None),
        ({"temperature": 0.3, "top_p": 0.9}, {"temperature": 0.3, "topP": 0.9}),
        ({"max_tokens": 20, "stop": "END"}, {"maxOutputTokens": 20, "stopSequences": ["END"]}),
        ({"response_format": {"type": "json_object"}}, {"responseMimeType": "application/json"}),
        # A schema is sent cut down to what Gemini accepts, so the answer has its shape.
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "launch",
                        "strict": True,
                        "schema": {
                            "type": "object",
                            "title": "Launch",
                            "properties": {"code": {"type": "string"}, "note": {"type": ["string", "null"]}},
                            "required": ["code", "note"],
                            "additionalProperties": False,
                        },
                    },
                }
            },
            {
                "responseMimeType": "application/json",
                "responseSchema": {
                    "type": "object",
                    "properties": {"code": {"type": "string"}, "note": {"type": "string", "nullable": True}},
                    "required": ["code", "note"],
                },
            },
        ),
        ({"response_format": {"type": "text"}}, None),
    ],
)
def test_sampling_fields_go_in_the_generation_config(body, config):
    assert payload(**body).get("generationConfig") == config


@pytest.mark.parametrize(
    ("tool_choice", "calling"),
    [
        (None, None),
        ("auto", {"mode": "AUTO"}),
        ("required", {"mode": "ANY"}),
        ("none", {"mode": "NONE"}),
        ({"type": "function", "function": {"name": "lookup"}}, {"mode": "ANY", "allowedFunctionNames": ["lookup"]}),
    ],
)
def test_tools_become_function_declarations(tool_choice, calling):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "finds",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string"}},
                    "additionalProperties": False,
                },
            },
        },
        # Parameters without properties are left out: Gemini refuses an empty object schema.
        {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}},
    ]
    extra = {} if tool_choice is None else {"tool_choice": tool_choice}
    sent = payload(tools=tools, **extra)
    assert sent["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "lookup",
                    "description": "finds",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
                {"name": "now", "description": ""},
            ]
        }
    ]
    assert sent.get("toolConfig") == (None if calling is None else {"functionCallingConfig": calling})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": [{"role": "critic", "content": "x"}]}, "messages[0].role 'critic' is not supported"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://i.test/a.png"}}]}
                ]
            },
            "gemini takes images inline only",
        ),
        (
            {
                "messages": [USER],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": "sometimes",
            },
            "tool_choice must be",
        ),
        (
            {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": "gs://a"}]}]},
            "messages[0] may only hold text",
        ),
        ({"messages": [USER], "tools": "lookup"}, "tools must be a list"),
    ],
)
def test_requests_gemini_cannot_take_are_the_clients_400(body, message):
    with pytest.raises(ServiceError) as raised:
        provider()._payload(body, stream=False)
    assert client_error(raised.value) == (400, "invalid_request_error", "invalid_request")
    assert message in raised.value.message


@pytest.mark.parametrize(
    ("reason", "parts", "finish"),
    [
        ("STOP", [{"text": "Hi"}], "stop"),
        ("MAX_TOKENS", [{"text": "Hi"}], "length"),
        ("SAFETY", [], "content_filter"),
        ("STOP", [{"functionCall": {"name": "lookup", "args": {"q": 1}, "id": "fc_1"}}], "tool_calls"),
    ],
)
def test_a_reply_becomes_a_completion(reason, parts, finish):
    reply = {
        "responseId": "resp-1",
        "candidates": [
            {"content": {"parts": [{"text": "thinking...", "thought": True}, *parts]}, "finishReason": reason}
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "toolUsePromptTokenCount": 2,
            "candidatesTokenCount": 5,
            "thoughtsTokenCount": 3,
            "cachedContentTokenCount": 4,
        },
    }
    completion = provider()._completion(reply)
    assert (completion["id"], completion["model"]) == ("resp-1", "gemini-x")
    [choice] = completion["choices"]
    assert choice["finish_reason"] == finish
    message = choice["message"]
    if finish == "tool_calls":
        assert message["content"] is None
        assert message["tool_calls"] == [
            {"id": "fc_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
        ]
    else:
        # The thought summary is not part of the answer.
        assert message == {"role": "assistant", "content": "Hi" if parts else ""}
    # Thoughts are completion tokens, and reported as reasoning.
    assert completion["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 8,
        "total_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }


def test_a_blocked_prompt_is_a_filtered_empty_answer():
    completion = provider()._completion({"promptFeedback": {"blockReason": "SAFETY"}})
    assert completion["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "content_filter"}
    ]


@pytest.mark.parametrize("reply", [{}, {"candidates": []}, {"candidates": "x"}])
def test_a_reply_without_candidates_is_malformed(reply):
    with pytest.raises(ServiceError) as raised:
        provider()._completion(reply)
    assert client_error(raised.value) == (502, "upstream_error", "upstream_malformed")


def test_a_stream_becomes_chunks_ending_with_the_finish_and_the_last_usage():
    events = [
        {
            "responseId": "r-5",
            "candidates": [{"content": {"parts": [{"text": "Hel"}]}}],
            "usageMetadata": {"promptTokenCount": 4},
        },
        {"candidates": [{"content": {"parts": [{"text": "lo"}, {"functionCall": {"name": "f", "args": {}}}]}}]},
        {
            "candidates": [{"content": {"parts": []}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 6},
        },
    ]
    chunks = translated_stream(provider(), sse(*events))
    assert {chunk["id"] for chunk in chunks} == {"r-5"}
    deltas = [chunk["choices"][0]["delta"] if chunk["choices"] else None for chunk in chunks]
    assert deltas[:3] == [{"role": "assistant", "content": ""}, {"content": "Hel"}, {"content": "lo"}]
    [call] = deltas[3]["tool_calls"]
    assert (call["index"], call["function"]) == (0, {"name": "f", "arguments": "{}"})
    assert call["id"].startswith("call_")
    assert deltas[4:] == [{}, None]
    assert chunks[4]["choices"][0]["finish_reason"] == "tool_calls"
    assert (chunks[-1]["usage"]["prompt_tokens"], chunks[-1]["usage"]["completion_tokens"]) == (4, 6)


def test_a_stream_whose_prompt_is_blocked_ends_filtered():
    chunks = translated_stream(provider(), sse({"promptFeedback": {"blockReason": "SAFETY"}}))
    assert chunks[-2]["choices"][0]["finish_reason"] == "content_filter"


def test_a_stream_without_a_finish_reason_is_truncated():
    with pytest.raises(ServiceError) as raised:
        translated_stream(provider(), sse({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]}))
    assert client_error(raised.value) == (502, "upstream_error", "upstream_truncated")


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        # A bad key is a 400 to Gemini and a 401 to a client.
        (
            400,
            {"status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}]},
            (401, "authentication_error", "invalid_api_key"),
        ),
        (400, {"status": "INVALID_ARGUMENT"}, (400, "invalid_request_error", "invalid_argument")),
        (429, {"status": "RESOURCE_EXHAUSTED"}, (429, "rate_limit_error", "resource_exhausted")),
        (503, None, (503, "upstream_error", None)),
    ],
)
def test_upstream_errors_map_to_what_a_client_sdk_understands(status, error, expected):
    assert provider()._classify(status, error) == expected
