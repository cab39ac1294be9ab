"""The official `openai` package, through projects whose chat connection is Anthropic, Gemini
or Ollama: each answered by a fake upstream speaking that provider's own wire format."""

from __future__ import annotations

import base64
import json

import openai
import pytest

from tests.fakes.upstream import CHAT_ANSWER, TOOL_ARGUMENTS
from tests.helpers import PLANTED_FACT, SYSTEM_PROMPT, wait_for_logs

CLIENT_SYSTEM = "Answer in one sentence."
QUESTION = "What is the launch code for Project Falcon?"
HISTORY = [
    {"role": "system", "content": CLIENT_SYSTEM},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi! How can I help?"},
    {"role": "user", "content": QUESTION},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Searches the handbook.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": ["integer", "null"]}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }
]
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\nfake-image-bytes").decode()


def anthropic_conversation(sent: dict) -> tuple[str, list[tuple[str, str]]]:
    turns = [(m["role"], " ".join(b["text"] for b in m["content"] if b["type"] == "text")) for m in sent["messages"]]
    return sent["system"], turns


def gemini_conversation(sent: dict) -> tuple[str, list[tuple[str, str]]]:
    system = " ".join(p["text"] for p in sent["systemInstruction"]["parts"])
    roles = {"user": "user", "model": "assistant"}
    turns = [(roles[c["role"]], " ".join(p["text"] for p in c["parts"] if "text" in p)) for c in sent["contents"]]
    return system, turns


def ollama_conversation(sent: dict) -> tuple[str, list[tuple[str, str]]]:
    system = " ".join(m["content"] for m in sent["messages"] if m["role"] == "system")
    return system, [(m["role"], m["content"]) for m in sent["messages"] if m["role"] != "system"]


PROVIDERS = {
    "anthropic": {
        "path": "",
        "model": "claude-sonnet-4-5",
        "route": "anthropic.messages",
        "stream_route": "anthropic.messages",
        "conversation": anthropic_conversation,
        "cached": 2,
    },
    "gemini": {
        "path": "/v1beta",
        "model": "gemini-2.5-flash",
        "route": "gemini.generate",
        "stream_route": "gemini.stream",
        "conversation": gemini_conversation,
        "cached": 1,
    },
    "ollama": {
        "path": "",
        "model": "llama3.2",
        "route": "ollama.chat",
        "stream_route": "ollama.chat",
        "conversation": ollama_conversation,
        "cached": 0,
    },
}
SECRET = "sk-provider-secret-0123456789"


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request) -> str:
    return request.param


@pytest.fixture
def spec(provider) -> dict:
    return PROVIDERS[provider]


def provider_connection(provider: str, fake_upstream):
    """A chat connection of ``provider``'s family, answered by its fake."""
    from gateway.connections.services import connection_create

    spec = PROVIDERS[provider]
    return connection_create(
        name=f"{provider}-chat",
        provider_type=provider,
        base_url=f"{fake_upstream.url}{spec['path']}",
        model_name=spec["model"],
        dimensions=None,
        api_key="" if provider == "ollama" else SECRET,
    )


@pytest.fixture
def provider_project(provider, fake_upstream, fake_connection, falcon_store):
    from gateway.clients.services import project_create

    connection = provider_connection(provider, fake_upstream)
    return project_create(
        name=f"{provider}-bot",
        chat_connection_id=connection.id,
        embedding_connection_id=fake_connection.id,
        store_id=falcon_store.id,
        system_prompt=SYSTEM_PROMPT,
    )


@pytest.fixture
def sdk(asgi_url, v1, provider_project):
    from gateway.clients.services import key_create

    key = key_create(project=provider_project, name="default", scopes=None, expires_at=None).key
    # `v1` for its teardown, which waits for the request log rows.
    client = openai.OpenAI(base_url=f"{asgi_url}/v1", api_key=key, max_retries=0, timeout=30)
    yield client
    client.close()


def sent_to(fake_upstream, route: str) -> dict:
    return fake_upstream.requests_to(route)[-1].json()


def assert_grounded_conversation(spec: dict, sent: dict) -> None:
    system, turns = spec["conversation"](sent)
    # Context first, then the project's system prompt, then the client's own system text.
    assert system.index(PLANTED_FACT) < system.index(SYSTEM_PROMPT) < system.index(CLIENT_SYSTEM)
    assert turns == [("user", "Hello"), ("assistant", "Hi! How can I help?"), ("user", QUESTION)]


def test_a_chat_completes_in_openai_shape(sdk, provider, spec, fake_upstream, provider_project):
    completion = sdk.chat.completions.create(model="my-alias", messages=HISTORY)
    choice = completion.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", CHAT_ANSWER, "stop")
    assert completion.object == "chat.completion" and completion.model == "my-alias"
    usage = completion.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens >= len(CHAT_ANSWER.split())
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens == spec["cached"]
    sent = sent_to(fake_upstream, spec["route"])
    assert_grounded_conversation(spec, sent)
    [row] = wait_for_logs(1, project=provider_project)
    assert (row.status_code, row.model, row.tokens_estimated, row.rag_hits) == (200, spec["model"], False, 1)
    assert (row.prompt_tokens, row.completion_tokens) == (usage.prompt_tokens, usage.completion_tokens)
    # Ollama reports no prompt cache; the others' cache reads are logged (writes: test_ledger).
    assert (row.cached_prompt_tokens, row.cache_write_tokens) == (spec["cached"], 0)


def test_a_chat_streams_in_openai_shape(sdk, provider, spec, fake_upstream, provider_project):
    chunks = list(
        sdk.chat.completions.create(
            model="my-alias", messages=HISTORY, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CHAT_ANSWER
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert {c.model for c in chunks} == {"my-alias"} and {c.object for c in chunks} == {"chat.completion.chunk"}
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens >= len(CHAT_ANSWER.split())
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    request = fake_upstream.requests_to(spec["stream_route"])[-1]
    assert_grounded_conversation(spec, request.json())
    if provider == "gemini":
        assert request.path.endswith(":streamGenerateContent?alt=sse")
    [row] = wait_for_logs(1, project=provider_project)
    assert (row.status_code, row.streamed, row.tokens_estimated) == (200, True, False)
    assert row.completion_tokens == usage.completion_tokens


def test_a_stream_without_usage_asked_for_has_no_usage_chunk(sdk, provider_project):
    chunks = list(sdk.chat.completions.create(model="m", messages=HISTORY, stream=True))
    assert all(c.usage is None for c in chunks) and all(c.choices for c in chunks)
    [row] = wait_for_logs(1, project=provider_project)
    assert row.completion_tokens > 0 and not row.tokens_estimated


@pytest.mark.parametrize("stream", [False, True])
def test_the_token_limit_and_stop_sequences_are_sent_and_length_comes_back(sdk, provider, spec, fake_upstream, stream):
    created = sdk.chat.completions.create(model="m", messages=HISTORY, max_tokens=3, stop=["END"], stream=stream)
    if stream:
        chunks = list(created)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        text, finish = created.choices[0].message.content, [created.choices[0].finish_reason]
    assert text == " ".join(CHAT_ANSWER.split(" ")[:3]) and finish == ["length"]
    sent = sent_to(fake_upstream, spec["stream_route"] if stream else spec["route"])
    limits = {
        "anthropic": (sent.get("max_tokens"), sent.get("stop_sequences")),
        "gemini": (
            sent.get("generationConfig", {}).get("maxOutputTokens"),
            sent.get("generationConfig", {}).get("stopSequences"),
        ),
        "ollama": (sent.get("options", {}).get("num_predict"), sent.get("options", {}).get("stop")),
    }
    assert limits[provider] == (3, ["END"])


TOOL_HISTORY = [
    {"role": "user", "content": QUESTION},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search_docs", "arguments": '{"query": "falcon"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"hits": 1}'},
    {"role": "user", "content": "Search again."},
]


def sent_tool_turns(provider: str, sent: dict) -> list:
    """The tool definitions, the earlier call and its result as the provider got them."""
    if provider == "anthropic":
        [tool] = sent["tools"]
        call = sent["messages"][1]["content"][0]
        result = sent["messages"][2]["content"][0]
        return [
            tool["name"],
            sorted(tool["input_schema"]["properties"]),
            (call["type"], call["id"], call["name"], call["input"]),
            (result["type"], result["tool_use_id"], result["content"]),
        ]
    if provider == "gemini":
        [declaration] = sent["tools"][0]["functionDeclarations"]
        # Gemini refuses JSON schema keywords it does not know; a [T, "null"] type is nullable.
        assert "additionalProperties" not in declaration["parameters"]
        assert declaration["parameters"]["properties"]["limit"] == {"type": "integer", "nullable": True}
        call = sent["contents"][1]["parts"][0]["functionCall"]
        result = sent["contents"][2]["parts"][0]["functionResponse"]
        return [
            declaration["name"],
            sorted(declaration["parameters"]["properties"]),
            ("functionCall", call["name"], call["args"]),
            ("functionResponse", result["name"], result["response"]),
        ]
    [tool] = sent["tools"]
    turns = [m for m in sent["messages"] if m["role"] != "system"]
    call = turns[1]["tool_calls"][0]["function"]
    result = turns[2]
    return [
        tool["function"]["name"],
        sorted(tool["function"]["parameters"]["properties"]),
        ("call", call["name"], call["arguments"]),
        (result["role"], result["tool_name"], result["content"]),
    ]


EXPECTED_TOOL_TURNS = {
    "anthropic": [
        "search_docs",
        ["limit", "query"],
        ("tool_use", "call_1", "search_docs", {"query": "falcon"}),
        ("tool_result", "call_1", '{"hits": 1}'),
    ],
    "gemini": [
        "search_docs",
        ["limit", "query"],
        ("functionCall", "search_docs", {"query": "falcon"}),
        ("functionResponse", "search_docs", {"hits": 1}),
    ],
    "ollama": [
        "search_docs",
        ["limit", "query"],
        ("call", "search_docs", {"query": "falcon"}),
        ("tool", "search_docs", '{"hits": 1}'),
    ],
}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_and_results_travel_both_ways(sdk, provider, spec, fake_upstream, stream):
    fake_upstream.configure(spec["route"], tool_call="search_docs")
    fake_upstream.configure(spec["stream_route"], tool_call="search_docs")
    created = sdk.chat.completions.create(
        model="m", messages=TOOL_HISTORY, tools=TOOLS, tool_choice="auto", stream=stream
    )
    if stream:
        calls: dict[int, dict] = {}
        finish = None
        for chunk in created:
            for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                call = calls.setdefault(delta_call.index, {"id": None, "name": None, "arguments": ""})
                call["id"] = delta_call.id or call["id"]
                call["name"] = (delta_call.function.name if delta_call.function else None) or call["name"]
                call["arguments"] += (delta_call.function.arguments or "") if delta_call.function else ""
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        [call] = calls.values()
    else:
        choice = created.choices[0]
        finish = choice.finish_reason
        [tool_call] = choice.message.tool_calls
        call = {"id": tool_call.id, "name": tool_call.function.name, "arguments": tool_call.function.arguments}
    assert finish == "tool_calls"
    assert call["id"] and call["name"] == "search_docs" and json.loads(call["arguments"]) == TOOL_ARGUMENTS
    sent = sent_to(fake_upstream, spec["stream_route"] if stream else spec["route"])
    assert sent_tool_turns(provider, sent) == EXPECTED_TOOL_TURNS[provider]


def test_inline_images_become_the_providers_image_parts(sdk, provider, spec, fake_upstream):
    content = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
    ]
    sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])
    sent = sent_to(fake_upstream, spec["route"])
    image = {
        "anthropic": lambda: sent["messages"][0]["content"][1],
        "gemini": lambda: sent["contents"][0]["parts"][1],
        "ollama": lambda: sent["messages"][-1]["images"],
    }[provider]()
    assert (
        image
        == {
            "anthropic": {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
            "gemini": {"inlineData": {"mimeType": "image/png", "data": PIXEL}},
            "ollama": [PIXEL],
        }[provider]
    )


@pytest.mark.parametrize(
    ("provider", "status", "knobs", "expected", "sdk_error", "code"),
    [
        ("anthropic", 400, {}, 400, openai.BadRequestError, "invalid_request_error"),
        ("anthropic", 529, {}, 503, openai.InternalServerError, "overloaded_error"),
        ("gemini", 404, {}, 404, openai.NotFoundError, "not_found"),
        ("gemini", 429, {}, 429, openai.RateLimitError, "resource_exhausted"),
        ("ollama", 404, {}, 404, openai.NotFoundError, None),
        ("ollama", 500, {}, 500, openai.InternalServerError, None),
    ],
    indirect=["provider"],
)
def test_upstream_errors_come_back_in_the_openai_envelope(
    sdk, provider, spec, fake_upstream, provider_project, status, knobs, expected, sdk_error, code
):
    fake_upstream.configure(spec["route"], status=status, **knobs)
    with pytest.raises(sdk_error) as caught:
        sdk.chat.completions.create(model="m", messages=HISTORY)
    assert caught.value.status_code == expected
    error = caught.value.response.json()["error"]
    assert set(error) == {"message", "type", "code"} and error["code"] == code
    assert f"{provider} answered HTTP {status}: fake upstream failure {status}" in error["message"]
    assert SECRET not in caught.value.response.text
    [row] = wait_for_logs(1, project=provider_project)
    assert row.status_code == expected


@pytest.mark.parametrize(
    ("provider", "status", "knobs"),
    [
        ("anthropic", 401, {}),
        ("anthropic", 403, {}),
        # Gemini refuses a bad key with 400 API_KEY_INVALID.
        ("gemini", 400, {"error_reason": "API_KEY_INVALID"}),
        ("gemini", 403, {}),
        ("ollama", 401, {}),
    ],
    indirect=["provider"],
)
def test_a_provider_refusing_the_connections_credentials_is_a_502_the_client_cannot_take_for_its_own_key(
    sdk, provider, spec, fake_upstream, provider_project, status, knobs
):
    fake_upstream.configure(spec["route"], status=status, **knobs)
    with pytest.raises(openai.InternalServerError) as caught:
        sdk.chat.completions.create(model="m", messages=HISTORY)
    assert caught.value.status_code == 502
    error = caught.value.response.json()["error"]
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_auth_failed")
    assert error["message"].startswith(
        f"{provider} refused the credentials of this gateway's connection (HTTP {status})"
    )
    assert SECRET not in caught.value.response.text
    [row] = wait_for_logs(1, project=provider_project)
    assert row.status_code == 502
    assert f"(HTTP {status})" in row.error


def test_an_error_before_the_first_chunk_of_a_stream_is_a_plain_error(sdk, spec, fake_upstream):
    fake_upstream.configure(spec["stream_route"], status=400)
    with pytest.raises(openai.BadRequestError):
        list(sdk.chat.completions.create(model="m", messages=HISTORY, stream=True))


def test_a_mid_stream_error_ends_the_stream_with_an_error_frame(v1, provider_project, spec, fake_upstream):
    from gateway.clients.services import key_create

    fake_upstream.configure(spec["stream_route"], error_after=3)
    key = key_create(project=provider_project, name="raw", scopes=None, expires_at=None).key
    response = v1(key).post("/chat/completions", json={"messages": HISTORY, "stream": True})
    assert response.status_code == 200
    frames = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    assert frames[-1] == "[DONE]"
    assert "failed mid-stream" in json.loads(frames[-2])["error"]["message"]
    [row] = wait_for_logs(1, project=provider_project)
    assert (row.status_code, row.streamed) == (502, True)


@pytest.mark.parametrize("provider", ["anthropic"], indirect=True)
def test_a_remote_image_is_sent_to_anthropic_by_its_url(sdk, provider, fake_upstream):
    # Gemini and Ollama get it fetched and inline: test_remote_images.
    content = [{"type": "image_url", "image_url": {"url": "https://images.example/cat.png"}}]
    sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])
    assert sent_to(fake_upstream, "anthropic.messages")["messages"][0]["content"][0]["source"] == {
        "type": "url",
        "url": "https://images.example/cat.png",
    }


def options_sent(provider: str, sent: dict) -> dict:
    if provider == "anthropic":
        return {"tool_choice": sent["tool_choice"], "temperature": sent["temperature"], "top_p": sent["top_p"]}
    if provider == "gemini":
        return {
            "toolConfig": sent["toolConfig"],
            "temperature": sent["generationConfig"]["temperature"],
            "responseMimeType": sent["generationConfig"]["responseMimeType"],
        }
    return {"format": sent["format"], "options": sent["options"], "keep_alive": sent["keep_alive"]}


EXPECTED_OPTIONS = {
    "anthropic": {
        "tool_choice": {"type": "tool", "name": "search_docs", "disable_parallel_tool_use": True},
        "temperature": 0.2,
        "top_p": 0.9,
    },
    "gemini": {
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["search_docs"]}},
        "temperature": 0.2,
        "responseMimeType": "application/json",
    },
    "ollama": {
        "format": "json",
        "options": {"num_ctx": 8192, "temperature": 0.2, "top_p": 0.9, "seed": 7},
        "keep_alive": "5m",
    },
}


def test_sampling_tool_choice_and_json_mode_are_said_in_the_providers_terms(sdk, provider, spec, fake_upstream):
    # Anthropic has no JSON mode (test_anthropic_refuses_a_json_response_format_it_cannot_honour).
    json_mode = {} if provider == "anthropic" else {"response_format": {"type": "json_object"}}
    sdk.chat.completions.create(
        model="m",
        messages=HISTORY,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "search_docs"}},
        parallel_tool_calls=False,
        temperature=0.2,
        top_p=0.9,
        seed=7,
        extra_body={"keep_alive": "5m", "options": {"num_ctx": 8192}},
        **json_mode,
    )
    assert options_sent(provider, sent_to(fake_upstream, spec["route"])) == EXPECTED_OPTIONS[provider]


@pytest.mark.parametrize("provider", ["anthropic"], indirect=True)
@pytest.mark.parametrize("response_format", [{"type": "json_object"}, {"type": "json_schema", "json_schema": {}}])
def test_anthropic_refuses_a_json_response_format_it_cannot_honour(sdk, provider, spec, fake_upstream, response_format):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="m", messages=HISTORY, response_format=response_format)
    assert caught.value.response.json()["error"]["message"].startswith(
        f"Anthropic models have no JSON mode: response_format '{response_format['type']}' cannot be honoured"
    )
    assert fake_upstream.calls(spec["route"]) == 0
    # Plain text is what Anthropic answers anyway.
    sdk.chat.completions.create(model="m", messages=HISTORY, response_format={"type": "text"})


@pytest.mark.parametrize("provider", ["ollama"], indirect=True)
def test_ollama_is_sent_no_tools_when_the_client_said_tool_choice_none(sdk, provider, spec, fake_upstream):
    fake_upstream.configure(spec["route"], tool_call="search_docs")
    allowed = sdk.chat.completions.create(model="m", messages=HISTORY, tools=TOOLS)
    assert allowed.choices[0].message.tool_calls
    forbidden = sdk.chat.completions.create(model="m", messages=HISTORY, tools=TOOLS, tool_choice="none")
    assert "tools" not in fake_upstream.requests_to(spec["route"])[-1].json()
    assert forbidden.choices[0].message.tool_calls is None
    assert forbidden.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("provider", ["anthropic"], indirect=True)
def test_cache_markers_reach_anthropic_on_content_parts(sdk, fake_upstream, provider):
    marker = {"type": "ephemeral"}
    system = [{"type": "text", "text": CLIENT_SYSTEM, "cache_control": marker}]
    question = [{"type": "text", "text": QUESTION, "cache_control": marker}]
    sdk.chat.completions.create(
        model="m", messages=[{"role": "system", "content": system}, {"role": "user", "content": question}]
    )
    sent = sent_to(fake_upstream, "anthropic.messages")
    assert sent["messages"][0]["content"] == [{"type": "text", "text": QUESTION, "cache_control": marker}]
    # The retrieved context put in front of the system text changes with every query, so the
    # marker there is dropped (by the injection) and the system text stays a plain string.
    assert isinstance(sent["system"], str) and sent["system"].endswith(CLIENT_SYSTEM)


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "narrator", "content": "Once upon a time"}],
        [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
        [{"role": "user", "content": 42}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,???"}}]}],
    ],
)
def test_requests_the_provider_cannot_take_are_a_400_before_any_call(sdk, spec, fake_upstream, messages):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="m", messages=messages)
    assert caught.value.response.json()["error"]["type"] == "invalid_request_error"
    assert fake_upstream.calls(spec["route"]) == 0


def test_every_chat_capable_provider_type_has_an_adapter():
    from gateway.connections.models import CHAT_PROVIDERS
    from gateway.connections.providers import chat

    assert frozenset(chat._CHAT_PROVIDERS) == CHAT_PROVIDERS
