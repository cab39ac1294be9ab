"""The OpenAI adapter's translation, without a network: the request it sends, the replies and
streams it relays, and what a client is told of an upstream's error."""

from __future__ import annotations

import pytest

from gateway.connections.providers.chat_openai import AzureOpenAIChat, CustomOpenAIChat, OpenAIChat
from ragmux.core.errors import ServiceError
from tests.helpers import client_error, sse, translated_stream

SECRET = "sk-upstream-secret-0123456789"
MESSAGES = [{"role": "user", "content": "hi"}]


def provider(adapter=OpenAIChat) -> OpenAIChat:
    return adapter(base_url="https://upstream.test/v1", api_key=SECRET, model="gpt-upstream")


@pytest.mark.parametrize(
    ("body", "stream", "sent"),
    [
        # The connection's model replaces the client's; the rest goes as it is.
        (
            {"model": "alias", "messages": MESSAGES, "temperature": 0.2},
            False,
            {"model": "gpt-upstream", "messages": MESSAGES, "temperature": 0.2, "stream": False},
        ),
        # A non-streamed call carries no stream options.
        (
            {"messages": MESSAGES, "stream_options": {"include_usage": True}},
            False,
            {"model": "gpt-upstream", "messages": MESSAGES, "stream": False},
        ),
        # A stream always asks for usage, keeping the client's other options.
        (
            {"messages": MESSAGES, "stream_options": {"include_obfuscation": False}},
            True,
            {
                "model": "gpt-upstream",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_obfuscation": False, "include_usage": True},
            },
        ),
        (
            {"messages": MESSAGES, "stream_options": "not an object"},
            True,
            {"model": "gpt-upstream", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}},
        ),
    ],
)
def test_the_request_is_relayed_with_the_connections_model(body, stream, sent):
    assert provider()._payload(body, stream=stream) == sent


@pytest.mark.parametrize(
    ("adapter", "field"), [(OpenAIChat, "max_completion_tokens"), (CustomOpenAIChat, "max_tokens")]
)
def test_the_probe_bounds_its_answer_with_the_field_the_server_knows(adapter, field):
    assert adapter.token_limit_field == field


@pytest.mark.parametrize(
    ("limits", "sent"),
    [
        ({"max_completion_tokens": 64}, {"max_tokens": 64}),
        ({"max_tokens": 32}, {"max_tokens": 32}),
        # Both named: the one the server knows wins.
        ({"max_tokens": 32, "max_completion_tokens": 64}, {"max_tokens": 32}),
    ],
)
def test_a_compatible_server_gets_the_token_limit_as_max_tokens(limits, sent):
    payload = provider(CustomOpenAIChat)._payload({"messages": MESSAGES, **limits}, stream=False)
    assert payload == {"model": "gpt-upstream", "messages": MESSAGES, "stream": False, **sent}


def test_openai_gets_the_token_limit_as_sent():
    payload = provider()._payload({"messages": MESSAGES, "max_completion_tokens": 64}, stream=False)
    assert payload["max_completion_tokens"] == 64 and "max_tokens" not in payload


def test_a_reply_with_choices_is_relayed_as_it_is():
    reply = {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0}], "usage": {"total_tokens": 3}}
    assert provider()._completion(reply) is reply


@pytest.mark.parametrize("reply", [{}, {"choices": None}, {"choices": {"0": {}}}])
def test_a_reply_without_a_choices_list_is_a_malformed_upstream(reply):
    with pytest.raises(ServiceError) as raised:
        provider()._completion(reply)
    assert client_error(raised.value) == (502, "upstream_error", "upstream_malformed")


def test_stream_events_are_relayed_up_to_done():
    first = {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}
    second = {"id": "c1", "choices": [], "usage": {"total_tokens": 5}}
    wire = sse(first, second, "[DONE]", {"never": "read"})
    assert translated_stream(provider(), b": keep-alive\n\n" + wire) == [first, second]


def test_stream_events_split_over_several_data_lines_are_one_event():
    wire = b'data: {"id": "c1",\r\ndata:  "choices": []}\r\n\r\ndata: [DONE]\n\n'
    assert translated_stream(provider(), wire) == [{"id": "c1", "choices": []}]


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (sse("{not json"), (502, "upstream_error", "upstream_malformed")),
        (sse({"error": {"message": f"overloaded for {SECRET}"}}), (502, "upstream_error", "upstream_error")),
        (sse({"error": "Bearer abcdefgh went away"}), (502, "upstream_error", "upstream_error")),
    ],
)
def test_a_broken_stream_fails_without_echoing_credentials(wire, expected):
    with pytest.raises(ServiceError) as raised:
        translated_stream(provider(), wire)
    assert client_error(raised.value) == expected
    assert SECRET not in raised.value.message and "abcdefgh" not in raised.value.message


@pytest.mark.parametrize(
    ("status", "body", "expected", "retryable"),
    [
        # The upstream's own type and code are relayed below 500...
        (
            400,
            {"error": {"message": "bad", "type": "invalid_request_error", "code": "context_length_exceeded"}},
            (400, "invalid_request_error", "context_length_exceeded"),
            False,
        ),
        # ... a type it leaves out comes from the status...
        (404, {"error": {"message": "no such model"}}, (404, "not_found_error", None), False),
        (
            429,
            {"error": {"message": "slow down", "code": "rate_limit_exceeded"}},
            (429, "rate_limit_error", "rate_limit_exceeded"),
            True,
        ),
        # ... and at 500 and above the type is always ours.
        (503, {"error": {"message": "busy", "type": "server_error"}}, (503, "upstream_error", None), True),
        (500, "not json at all", (500, "upstream_error", None), False),
    ],
)
def test_upstream_errors_keep_their_status_and_say_whether_to_retry(status, body, expected, retryable):
    import json

    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    error = provider()._refusal(status, content, {})
    assert client_error(error) == expected
    assert error.retryable is retryable
    assert error.message.startswith(f"openai answered HTTP {status}: ")


def test_an_upstream_error_message_never_carries_the_key():
    error = provider()._refusal(401, f'{{"error": {{"message": "key {SECRET} is wrong"}}}}'.encode(), {})
    assert SECRET not in error.message and "[redacted]" in error.message


def test_an_empty_error_body_still_says_something():
    assert provider()._refusal(502, b"", {}).message == "openai answered HTTP 502: no details"


DEEPSEEK_USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 5,
    "total_tokens": 125,
    "prompt_cache_hit_tokens": 100,
    "prompt_cache_miss_tokens": 20,
}


def test_deepseeks_cache_hits_are_said_as_cached_prompt_tokens_and_its_own_fields_stay():
    reply = {"choices": [{"index": 0}], "usage": DEEPSEEK_USAGE}
    usage = provider(CustomOpenAIChat)._completion(reply)["usage"]
    assert usage == {**DEEPSEEK_USAGE, "prompt_tokens_details": {"cached_tokens": 100}}


def test_deepseeks_cache_hits_in_a_streams_usage_chunk_are_cached_prompt_tokens():
    usage_chunk = {
        "id": "c1",
        "choices": [],
        "usage": {**DEEPSEEK_USAGE, "prompt_tokens_details": {"cached_tokens": 0}},
    }
    [chunk] = translated_stream(provider(CustomOpenAIChat), sse(usage_chunk, "[DONE]"))
    assert chunk["usage"]["prompt_tokens_details"] == {"cached_tokens": 100}
    assert chunk["usage"]["prompt_cache_hit_tokens"] == 100


def azure(api_version: str) -> AzureOpenAIChat:
    return AzureOpenAIChat(
        base_url="https://res.openai.azure.com", api_key=SECRET, model="chat prod", api_version=api_version
    )


@pytest.mark.parametrize(
    ("api_version", "url"),
    [
        (
            "2024-10-21",
            "https://res.openai.azure.com/openai/deployments/chat%20prod/chat/completions?api-version=2024-10-21",
        ),
        ("", "https://res.openai.azure.com/openai/v1/chat/completions"),
    ],
)
def test_azure_is_called_at_the_deployments_path_or_the_v1_path_with_its_key_header(api_version, url):
    adapter = azure(api_version)
    assert adapter._url(stream=True) == adapter._url(stream=False) == url
    assert adapter._headers() == {"Content-Type": "application/json", "api-key": SECRET}
    # The deployment goes as `model` too: the v1 API reads it there, the classic paths ignore it.
    assert adapter._payload({"messages": MESSAGES}, stream=False)["model"] == "chat prod"


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, {"error": {"code": "DeploymentNotFound", "message": "no"}}, (404, "not_found_error", "model_not_found")),
        (429, {"error": {"code": "429", "message": "slow"}}, (429, "rate_limit_error", "rate_limit_exceeded")),
        (
            400,
            {"error": {"code": "content_filter", "message": "filtered", "type": None, "param": "prompt"}},
            (400, "invalid_request_error", "content_filter"),
        ),
        (404, {"error": {"code": "404", "message": "Resource not found"}}, (404, "not_found_error", None)),
        (
            500,
            {"error": {"code": "InternalServerError", "message": "boom", "type": "server_error"}},
            (500, "upstream_error", "InternalServerError"),
        ),
    ],
)
def test_azure_error_bodies_are_said_in_openai_terms(status, body, expected):
    import json

    error = azure("")._refusal(status, json.dumps(body).encode(), {})
    assert client_error(error)[:2] == expected[:2] and error.code == expected[2]
    assert error.message.startswith(f"azure_openai answered HTTP {status}: ")
    assert "{" not in error.message
