"""`/v1/responses` through the official `openai` package, unchanged but for its base URL and key:
answered by the chat pipeline against the fake upstreams (OpenAI's wire format, Anthropic's,
and a route), stored, continued, read back and deleted by a key of its project only."""

from __future__ import annotations

import json
from decimal import Decimal

import openai
import pytest

from tests.fakes.upstream import CHAT_ANSWER, TOOL_ARGUMENTS
from tests.helpers import SYSTEM_PROMPT, wait_for_logs

QUESTION = "What is the launch code for Project Falcon?"
TOOL = {
    "type": "function",
    "name": "search_docs",
    "description": "Searches the handbook.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}


def sdk_for(asgi_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{asgi_url}/v1", api_key=key, max_retries=0, timeout=30)


@pytest.fixture
def sdk(asgi_url, v1, project_key):
    # `v1` for its teardown, which waits for the request log rows.
    client = sdk_for(asgi_url, project_key)
    yield client
    client.close()


def sent_chat(fake_upstream, route: str = "openai.chat") -> dict:
    return fake_upstream.requests_to(route)[-1].json()


def test_a_text_response_is_the_chats_answer_logged_and_priced(sdk, fake_upstream, project):
    from gateway.connections.models import ModelPrice

    ModelPrice.objects.filter(provider_type="openai", model="gpt-4o-mini").update(
        input_per_mtok=Decimal(1000), output_per_mtok=Decimal(2000)
    )
    response = sdk.responses.create(model="my-alias", input=QUESTION, instructions="Be brief.", metadata={"a": "b"})

    assert (response.status, response.output_text, response.model) == ("completed", CHAT_ANSWER, "my-alias")
    assert response.id.startswith("resp_") and response.object == "response"
    [message] = response.output
    assert (message.type, message.role, message.content[0].type) == ("message", "assistant", "output_text")
    assert response.metadata == {"a": "b"} and response.incomplete_details is None
    sent = sent_chat(fake_upstream)
    assert sent["model"] == "gpt-4o-mini"
    roles = [(m["role"], m["content"]) for m in sent["messages"]]
    # The instructions join the project's system prompt and context, as a chat's system message does.
    assert roles[0][0] == "system" and SYSTEM_PROMPT in roles[0][1] and roles[0][1].endswith("Be brief.")
    assert roles[-1] == ("user", QUESTION)
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.streamed, row.model) == ("responses", 200, False, "gpt-4o-mini")
    assert (row.prompt_tokens, row.completion_tokens) == (response.usage.input_tokens, response.usage.output_tokens)
    assert row.rag_hits == 1  # grounded in the project's store, as its chats are
    assert row.cost_source == "price_table" and row.cost_micros >= row.prompt_tokens * 1000


def assert_a_text_answers_events(kinds: list[str]) -> None:
    """``kinds`` are the events of a response answered with text alone, in OpenAI's order."""
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}


def test_a_streamed_response_sends_the_typed_events_in_order(sdk, project):
    with sdk.responses.stream(model="m", input=QUESTION) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()

    assert_a_text_answers_events(kinds)
    assert final.output_text == CHAT_ANSWER and final.usage.output_tokens == len(CHAT_ANSWER.split())
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.streamed, row.tokens_estimated) == ("responses", 200, True, False)


def test_the_stream_numbers_its_events(v1, project_key):
    with v1(project_key).stream("POST", "/responses", json={"input": QUESTION, "stream": True}) as answer:
        lines = [line for line in answer.iter_lines() if line.startswith("data: ")]
    numbers = [json.loads(line[6:])["sequence_number"] for line in lines]
    assert numbers == list(range(len(lines)))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_function_tool_round_trip(sdk, fake_upstream, stream):
    fake_upstream.configure("openai.chat", tool_call="search_docs")
    if stream:
        with sdk.responses.stream(model="m", input=QUESTION, tools=[TOOL]) as events:
            first = events.get_final_response()
    else:
        first = sdk.responses.create(model="m", input=QUESTION, tools=[TOOL])
    [call] = first.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "search_docs", TOOL_ARGUMENTS)
    sent = sent_chat(fake_upstream)
    assert sent["tools"] == [{"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}]

    fake_upstream.configure("openai.chat", tool_call=None)
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "AMBER-7731"}
    second = sdk.responses.create(model="m", previous_response_id=first.id, input=[output], tools=[TOOL])
    assert second.output_text == CHAT_ANSWER and second.previous_response_id == first.id
    messages = sent_chat(fake_upstream)["messages"]
    assert messages[-2]["tool_calls"][0]["id"] == call.call_id
    assert messages[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "AMBER-7731"}


def test_previous_response_id_continues_the_conversation(sdk, fake_upstream):
    first = sdk.responses.create(model="m", input="Hello")
    sdk.responses.create(model="m", input=QUESTION, previous_response_id=first.id)
    conversation = [(m["role"], m["content"]) for m in sent_chat(fake_upstream)["messages"] if m["role"] != "system"]
    assert conversation == [("user", "Hello"), ("assistant", CHAT_ANSWER), ("user", QUESTION)]


def test_a_stored_response_is_retrieved_listed_and_deleted(sdk):
    created = sdk.responses.create(
        model="m",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
            {"role": "user", "content": QUESTION},
        ],
    )
    assert sdk.responses.retrieve(created.id).output_text == CHAT_ANSWER
    items = sdk.responses.input_items.list(created.id)
    assert [item.content[0].text for item in items.data] == [QUESTION, "Hello"]  # newest first
    oldest_first = sdk.responses.input_items.list(created.id, order="asc", limit=1)
    assert [item.content[0].text for item in oldest_first.data] == ["Hello"] and oldest_first.has_more
    sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(created.id)


def test_store_false_keeps_nothing(sdk):
    created = sdk.responses.create(model="m", input=QUESTION, store=False)
    assert created.store is False
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)


def test_a_key_of_another_project_cannot_see_a_stored_response(sdk, asgi_url, chat_connection):
    from gateway.clients.services import key_create, project_create

    created = sdk.responses.create(model="m", input=QUESTION)
    other = project_create(
        name="other",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
    )
    stranger = sdk_for(asgi_url, key_create(project=other, name="k", scopes=None, expires_at=None).key)
    for read in (stranger.responses.retrieve, stranger.responses.delete, stranger.responses.input_items.list):
        with pytest.raises(openai.NotFoundError):
            read(created.id)
    with pytest.raises(openai.NotFoundError):
        stranger.responses.create(model="m", input="Hi", previous_response_id=created.id)
    assert sdk.responses.retrieve(created.id).id == created.id


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/responses"),
        ("GET", "/responses/resp_1"),
        ("DELETE", "/responses/resp_1"),
        ("GET", "/responses/resp_1/input_items"),
    ],
)
def test_a_call_without_a_key_is_refused(v1, method, path):
    answer = v1().request(method, path, json={"input": QUESTION} if method == "POST" else None)
    assert answer.status_code == 401 and answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/responses"), ("PUT", "/responses/resp_1"), ("POST", "/responses/resp_1/input_items")],
)
def test_a_method_a_route_does_not_take_is_a_405_in_the_envelope(v1, project_key, method, path):
    answer = v1(project_key).request(method, path)
    assert answer.status_code == 405 and answer.json()["error"]["message"]


def test_a_key_without_the_chat_scope_is_refused(asgi_url, v1, project):
    from gateway.clients.services import key_create

    key = key_create(project=project, name="retrieval only", scopes=["retrieve"], expires_at=None).key
    with pytest.raises(openai.PermissionDeniedError):
        sdk_for(asgi_url, key).responses.create(model="m", input=QUESTION)


def test_limits_and_budgets_apply_and_a_denied_response_costs_nothing(sdk, project, fake_upstream):
    from gateway.clients.services import project_update

    project_update(project=project, rate_limit_rpm=1)
    fake_upstream.forget_requests()  # the store's ingestion
    sdk.responses.create(model="m", input=QUESTION)
    with pytest.raises(openai.RateLimitError):
        sdk.responses.create(model="m", input=QUESTION, stream=True)
    assert fake_upstream.calls("openai.chat") == 1
    [_, denied] = wait_for_logs(2, project=project)
    assert (denied.endpoint, denied.status_code, denied.cost_micros, denied.completion_tokens) == (
        "responses",
        429,
        0,
        0,
    )


@pytest.mark.parametrize("tool", ["web_search", "web_search_preview", "code_interpreter", "computer_use_preview"])
def test_a_tool_we_do_not_run_is_refused_by_name(sdk, fake_upstream, tool):
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="m", input=QUESTION, tools=[{"type": tool}])
    assert tool in refused.value.message
    assert fake_upstream.calls("openai.chat") == 0


def test_a_mid_stream_failure_ends_with_response_failed(sdk, fake_upstream, project):
    fake_upstream.configure("openai.chat", error_after=3)
    with sdk.responses.stream(model="m", input=QUESTION) as stream:
        events = list(stream)
    assert events[-1].type == "response.failed" and events[-1].response.status == "failed"
    assert events[-1].response.error.message
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.streamed) == ("responses", True) and row.status_code >= 500


# ------------------------------------------------------------------------------------------------
# Another provider family, and a route
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def anthropic_key(fake_upstream, fake_connection, falcon_store) -> str:
    from gateway.clients.services import key_create, project_create
    from gateway.connections.services import connection_create

    connection = connection_create(
        name="anthropic-chat",
        provider_type="anthropic",
        base_url=fake_upstream.url,
        model_name="claude-sonnet-4-5",
        dimensions=None,
        api_key="sk-ant-secret-0123456789",
    )
    project = project_create(
        name="anthropic-bot",
        chat_connection_id=connection.id,
        embedding_connection_id=fake_connection.id,
        store_id=falcon_store.id,
        system_prompt=SYSTEM_PROMPT,
    )
    return key_create(project=project, name="default", scopes=None, expires_at=None).key


def test_an_anthropic_project_answers_and_says_when_the_token_limit_cut_it(asgi_url, v1, anthropic_key, fake_upstream):
    client = sdk_for(asgi_url, anthropic_key)
    whole = client.responses.create(model="m", input=QUESTION)
    assert whole.output_text == CHAT_ANSWER and whole.status == "completed"
    cut = client.responses.create(model="m", input=QUESTION, max_output_tokens=3)
    assert (cut.status, cut.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert sent_chat(fake_upstream, "anthropic.messages")["max_tokens"] == 3
    with client.responses.stream(model="m", input=QUESTION) as stream:
        assert stream.get_final_response().output_text == CHAT_ANSWER


def test_an_anthropic_tool_call_is_a_function_call_item(asgi_url, v1, anthropic_key, fake_upstream):
    fake_upstream.configure("anthropic.messages", tool_call="search_docs")
    with sdk_for(asgi_url, anthropic_key).responses.stream(model="m", input=QUESTION, tools=[TOOL]) as stream:
        [call] = stream.get_final_response().output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "search_docs", TOOL_ARGUMENTS)


def test_a_response_through_a_route_fails_over(asgi_url, v1, project, upstreams, settings, fresh_cooldowns):
    from gateway.clients.services import key_create
    from tests.gateway.clients.test_routed_chat import make_route

    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 30
    route = make_route(upstreams)
    project.allowed_routes.add(route)
    key = key_create(project=project, name="routed", scopes=None, expires_at=None).key
    upstreams[0].configure("openai.chat", status=500)

    response = sdk_for(asgi_url, key).responses.create(model=route.name, input=QUESTION)

    assert response.output_text == CHAT_ANSWER and response.model == route.name
    assert [upstream.calls("openai.chat") for upstream in upstreams] == [1, 1, 0]
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.route_name, row.target) == ("responses", route.name, f"{route.name}-target-1")


# ------------------------------------------------------------------------------------------------
# Hostile input: each a 4xx in OpenAI's envelope, nothing sent upstream, never a 500
# ------------------------------------------------------------------------------------------------

HOSTILE_BODIES = {
    "input of the wrong type": {"input": 5},
    "an empty input list": {"input": []},
    "an item that is not an object": {"input": ["hi"]},
    "an unknown item type": {"input": [{"type": "item_reference", "id": "msg_1"}]},
    "an unknown part type": {"input": [{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}]},
    "a NUL in the input": {"input": "launch\u0000code"},
    "a NUL deep in a tool's schema": {
        "input": "hi",
        "tools": [{**TOOL, "parameters": {"type": "object", "description": "a\u0000b"}}],
    },
    "a huge max_output_tokens": {"input": "hi", "max_output_tokens": 10**30},
    "a huge temperature": {"input": "hi", "temperature": 1e300},
    "tools of the wrong type": {"input": "hi", "tools": "search_docs"},
    "a function tool without a name": {"input": "hi", "tools": [{"type": "function"}]},
    "a tool type that is not a string": {"input": "hi", "tools": [{"type": ["function"]}]},
    "a tool_choice of the wrong type": {"input": "hi", "tools": [TOOL], "tool_choice": 5},
    "metadata of the wrong type": {"input": "hi", "metadata": ["a"]},
    "a previous_response_id of the wrong type": {"input": "hi", "previous_response_id": ["resp_1"]},
    "an unknown previous_response_id": {"input": "hi", "previous_response_id": "resp_nope"},
    "a structured output format": {"input": "hi", "text": {"format": {"type": "json_schema", "schema": {}}}},
}


@pytest.mark.parametrize("case", sorted(HOSTILE_BODIES))
def test_hostile_bodies_are_refused_in_openais_envelope(v1, project_key, fake_upstream, case):
    answer = v1(project_key).post("/responses", json=HOSTILE_BODIES[case])
    assert 400 <= answer.status_code < 500, answer.text
    assert set(answer.json()["error"]) >= {"message", "type", "code"}
    assert fake_upstream.calls("openai.chat") == 0


@pytest.mark.parametrize(
    "path",
    [
        "/responses/resp%00x",
        "/responses/" + "x" * 300,
        "/responses/resp_x/input_items?limit=" + "9" * 5000,
        "/responses/resp_x/input_items?limit=abc",
        "/responses/resp_x/input_items?order=sideways",
        "/responses/resp_x/input_items?after=%00",
    ],
)
def test_hostile_paths_and_queries_are_refused_in_openais_envelope(v1, project_key, path):
    answer = v1(project_key).get(path)
    assert answer.status_code in (400, 404), answer.text
    assert answer.json()["error"]["message"]


def test_input_items_pages_refuse_a_limit_out_of_range(sdk):
    created = sdk.responses.create(model="m", input=QUESTION)
    for limit in (0, 101):
        with pytest.raises(openai.BadRequestError):
            sdk.responses.input_items.list(created.id, limit=limit)


def test_each_call_has_one_log_row(sdk, project):
    created = sdk.responses.create(model="m", input=QUESTION)
    sdk.responses.retrieve(created.id)
    sdk.responses.input_items.list(created.id)
    sdk.responses.delete(created.id)
    rows = wait_for_logs(4, project=project)
    assert [(row.endpoint, row.status_code) for row in rows] == [("responses", 200)] * 4
    assert rows[0].completion_tokens > 0 and all(row.completion_tokens == 0 for row in rows[1:])


def test_stored_responses_are_purged_with_the_request_log(sdk, settings):
    from datetime import timedelta

    from django.utils import timezone

    from gateway.clients.models import StoredResponse
    from gateway.clients.tasks import purge_request_logs

    old, recent = (sdk.responses.create(model="m", input=QUESTION).id for _ in range(2))
    StoredResponse.objects.filter(pk=old).update(created_at=timezone.now() - timedelta(days=31))
    settings.LOG_RETENTION_DAYS = 30
    purge_request_logs()
    assert list(StoredResponse.objects.values_list("pk", flat=True)) == [recent]
