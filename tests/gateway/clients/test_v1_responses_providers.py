"""`/v1/responses` through the official `openai` package on every chat provider family and a
route: each case is a project whose chat goes to a fake upstream speaking that family's own wire
format (OpenAI, an OpenAI-compatible server, Azure OpenAI, Ollama, Gemini, Anthropic), or a
route of two families whose first target fails. A test takes the ``case`` fixture and runs once
per family; what the upstream received is read in its own wire format."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

import openai
import pydantic
import pytest

from tests.fakes.azure import AZURE_KEY
from tests.fakes.upstream import CHAT_ANSWER, JSON_ANSWER, TOOL_ARGUMENTS, FakeUpstream
from tests.gateway.clients.test_provider_adapters import (
    PIXEL,
    anthropic_conversation,
    gemini_conversation,
    ollama_conversation,
)
from tests.gateway.clients.test_v1_responses import QUESTION, TOOL, assert_a_text_answers_events, sdk_for
from tests.helpers import SYSTEM_PROMPT, wait_for_logs

SECRET = "sk-provider-secret-0123456789"
TOOL_RESULT = "AMBER-7731"
# Prompt-cache reads and writes the fake reports, in each family's own usage fields (Ollama has
# no cache; only Anthropic reports writes).
CACHE_READS, CACHE_WRITES = 3, 4
ROUTE = "falcon-mixed"


def openai_conversation(sent: dict) -> tuple[str, list[tuple[str, str]]]:
    def text(content) -> str:
        parts = content if isinstance(content, list) else []
        return " ".join(p["text"] for p in parts if p["type"] == "text") if parts else content

    system = " ".join(m["content"] for m in sent["messages"] if m["role"] == "system")
    return system, [(m["role"], text(m["content"])) for m in sent["messages"] if m["role"] != "system"]


# Each reader gives the upstream's last tool turns in its own wire format: the calls of the
# assistant's turn as (id, name, arguments) and the results after it as (the id, or the function's
# name where the format matches results to calls by name, and the text).
ToolTurns = tuple[list[tuple[str | None, str, dict]], list[tuple[str, str]]]


def openai_tool_turns(sent: dict) -> ToolTurns:
    messages = sent["messages"]
    results = [m for m in messages[1:] if m["role"] == "tool"]
    call = messages[-len(results) - 1]
    calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in call["tool_calls"]]
    assert messages[-len(results) :] == results and all(c["type"] == "function" for c in call["tool_calls"])
    return calls, [(m["tool_call_id"], m["content"]) for m in results]


def anthropic_tool_turns(sent: dict) -> ToolTurns:
    # The results of a turn's calls travel together, in one user turn, as Anthropic requires.
    call, result = sent["messages"][-2:]
    assert (call["role"], result["role"]) == ("assistant", "user")
    assert {b["type"] for b in result["content"]} == {"tool_result"}
    calls = [(b["id"], b["name"], b["input"]) for b in call["content"] if b["type"] == "tool_use"]
    return calls, [(b["tool_use_id"], b["content"]) for b in result["content"]]


def gemini_tool_turns(sent: dict) -> ToolTurns:
    call, result = sent["contents"][-2:]
    assert (call["role"], result["role"]) == ("model", "user")
    calls = [(None, p["functionCall"]["name"], p["functionCall"]["args"]) for p in call["parts"]]
    return calls, [
        (p["functionResponse"]["name"], p["functionResponse"]["response"]["result"]) for p in result["parts"]
    ]


def ollama_tool_turns(sent: dict) -> ToolTurns:
    messages = sent["messages"]
    results = [m for m in messages if m["role"] == "tool"]
    call = messages[-len(results) - 1]
    assert messages[-len(results) :] == results
    calls = [(None, c["function"]["name"], c["function"]["arguments"]) for c in call["tool_calls"]]
    return calls, [(m["tool_name"], m["content"]) for m in results]


# Where each wire format says the JSON schema an answer must follow.
def openai_json_schema(sent: dict) -> dict:
    assert sent["response_format"]["type"] == "json_schema"
    return sent["response_format"]["json_schema"]["schema"]


def gemini_json_schema(sent: dict) -> dict:
    assert sent["generationConfig"]["responseMimeType"] == "application/json"
    return sent["generationConfig"]["responseSchema"]


def ollama_json_schema(sent: dict) -> dict:
    return sent["format"]


@dataclass(frozen=True)
class Family:
    """A chat provider family as the fake upstream speaks it."""

    provider_type: str
    path: str  # the connection's base URL after the fake's own
    model: str
    whole: str  # the fake's route answering a whole chat
    streamed: str  # and a streamed one
    limit_field: tuple[str, ...]  # where the answer's token limit is in the upstream's request
    conversation: Callable[[dict], tuple[str, list[tuple[str, str]]]]
    tool_turns: Callable[[dict], ToolTurns]
    calls_have_ids: bool = True  # else results are matched to calls by the function's name
    json_schema: Callable[[dict], dict] | None = None  # None: the family has no JSON mode
    cache_reads: int = CACHE_READS
    cache_writes: int = 0
    reasoning_tokens: int = 0  # the thinking tokens the fake reports (Gemini's thoughts)
    api_key: str = SECRET


OPENAI_READERS = {
    "conversation": openai_conversation,
    "tool_turns": openai_tool_turns,
    "json_schema": openai_json_schema,
}
FAMILIES = {
    "openai": Family(
        "openai", "/v1", "gpt-4o-mini", "openai.chat", "openai.chat", ("max_completion_tokens",), **OPENAI_READERS
    ),
    # Compatible servers (vLLM, llama.cpp, LM Studio) know the limit by its older name.
    "custom_openai": Family(
        "custom_openai", "/v1", "qwen2.5-7b-instruct", "openai.chat", "openai.chat", ("max_tokens",), **OPENAI_READERS
    ),
    "azure_openai": Family(
        "azure_openai",
        "/openai",
        "chat-prod",
        "azure.v1_chat",
        "azure.v1_chat",
        ("max_completion_tokens",),
        **OPENAI_READERS,
        api_key=AZURE_KEY,
    ),
    "ollama": Family(
        "ollama",
        "",
        "llama3.2",
        "ollama.chat",
        "ollama.chat",
        ("options", "num_predict"),
        ollama_conversation,
        ollama_tool_turns,
        calls_have_ids=False,
        json_schema=ollama_json_schema,
        cache_reads=0,
        api_key="",
    ),
    "gemini": Family(
        "gemini",
        "/v1beta",
        "gemini-2.5-flash",
        "gemini.generate",
        "gemini.stream",
        ("generationConfig", "maxOutputTokens"),
        gemini_conversation,
        gemini_tool_turns,
        calls_have_ids=False,
        json_schema=gemini_json_schema,
        reasoning_tokens=2,
    ),
    "anthropic": Family(
        "anthropic",
        "",
        "claude-sonnet-4-5",
        "anthropic.messages",
        "anthropic.messages",
        ("max_tokens",),
        anthropic_conversation,
        anthropic_tool_turns,
        cache_writes=CACHE_WRITES,
    ),
}
# A route's targets, in order: the first fails, the second answers.
ROUTE_FAMILIES = ("anthropic", "gemini")


@dataclass
class Case:
    """One family's project (or route) and an official client with a key of it."""

    family: Family  # the family that answers
    client: openai.OpenAI
    model: str  # the model the client asks for
    project: object
    upstream: FakeUpstream

    def configure(self, **knobs) -> None:
        """Sets the knobs on the answering family's routes, whole and streamed."""
        for route in {self.family.whole, self.family.streamed}:
            self.upstream.configure(route, **knobs)

    def sent(self) -> dict:
        """The last chat request the answering family's upstream received."""
        requests = self.upstream.requests_to(self.family.whole) + self.upstream.requests_to(self.family.streamed)
        return max(requests, key=lambda request: request.received).json()

    def sent_limit(self) -> int | None:
        value = self.sent()
        for name in self.family.limit_field:
            value = value.get(name) if isinstance(value, dict) else None
        return value

    def log_row(self, count: int = 1):
        """The last of ``count`` request log rows, checked to be the answering family's, priced."""
        rows = wait_for_logs(count, project=self.project)
        assert len(rows) == count
        row = rows[-1]
        assert (row.endpoint, row.status_code, row.model) == ("responses", 200, self.family.model)
        assert row.cost_source == "price_table" and row.cost_micros > 0
        if self.model == ROUTE:
            assert (row.route_name, row.target) == (ROUTE, f"{ROUTE}-target-1")
            assert (row.attempts[-1]["target"], row.attempts[-1]["outcome"]) == (f"{ROUTE}-target-1", "ok")
        return row

    def expected_tool_turns(self, calls: list[tuple[str, str, dict, str]]) -> ToolTurns:
        """What :attr:`Family.tool_turns` reads for ``calls`` (call id, name, arguments, result)."""
        ids = self.family.calls_have_ids
        return (
            [(call_id if ids else None, name, arguments) for call_id, name, arguments, _ in calls],
            [(call_id if ids else name, result) for call_id, name, _, result in calls],
        )


def _connection(family: Family, upstream: FakeUpstream, name: str):
    from gateway.connections.models import ModelPrice
    from gateway.connections.services import connection_create

    # Priced by provider and model: a priced row says which family answered.
    ModelPrice.objects.update_or_create(
        provider_type=family.provider_type,
        model=family.model,
        defaults={"input_per_mtok": Decimal(1000), "output_per_mtok": Decimal(2000), "cached_input_per_mtok": None},
    )
    return connection_create(
        name=name,
        provider_type=family.provider_type,
        base_url=f"{upstream.url}{family.path}",
        model_name=family.model,
        dimensions=None,
        api_key=family.api_key,
        **({"api_version": ""} if family.provider_type == "azure_openai" else {}),
    )


def _route(upstream: FakeUpstream, project) -> Family:
    """A route of one target per family of ROUTE_FAMILIES, the first failing; the answering
    family."""
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name=ROUTE, strategy="ordered")
    families = [FAMILIES[name] for name in ROUTE_FAMILIES]
    for position, family in enumerate(families):
        RouteTargetFactory(route=route, connection=_connection(family, upstream, f"{ROUTE}-target-{position}"))
    project.allowed_routes.add(route)
    failing = families[0]
    for fake_route in {failing.whole, failing.streamed}:
        upstream.configure(fake_route, status=500)
    return families[1]


@pytest.fixture(params=[*FAMILIES, "route"])
def case(request, asgi_url, v1, fake_upstream, fake_connection, falcon_store, settings, fresh_cooldowns):
    from gateway.clients.services import key_create, project_create

    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 30
    routed = request.param == "route"
    family = FAMILIES["openai" if routed else request.param]
    project = project_create(
        name=f"{request.param}-bot",
        chat_connection_id=_connection(family, fake_upstream, f"{family.provider_type}-chat").id,
        embedding_connection_id=fake_connection.id,
        store_id=falcon_store.id,
        system_prompt=SYSTEM_PROMPT,
    )
    if routed:
        family = _route(fake_upstream, project)
    key = key_create(project=project, name="default", scopes=None, expires_at=None).key
    client = sdk_for(asgi_url, key)
    found = Case(family, client, ROUTE if routed else "any-model", project, fake_upstream)
    found.configure(prompt_cache=(CACHE_READS, CACHE_WRITES))
    fake_upstream.forget_requests()  # the store's ingestion
    yield found
    client.close()


def test_a_text_response(case):
    response = case.client.responses.create(model=case.model, input=QUESTION, instructions="Be brief.")

    assert (response.status, response.output_text, response.incomplete_details) == ("completed", CHAT_ANSWER, None)
    [message] = response.output
    assert (message.type, message.role, message.content[0].type) == ("message", "assistant", "output_text")
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.usage.input_tokens_details.cached_tokens == case.family.cache_reads
    system, turns = case.family.conversation(case.sent())
    assert SYSTEM_PROMPT in system and system.endswith("Be brief.") and turns[-1] == ("user", QUESTION)
    assert response.usage.output_tokens_details.reasoning_tokens == case.family.reasoning_tokens
    row = case.log_row()
    assert (row.streamed, row.completion_tokens) == (False, response.usage.output_tokens)
    assert (row.cached_prompt_tokens, row.cache_write_tokens) == (case.family.cache_reads, case.family.cache_writes)
    if case.model == ROUTE:
        # The first target failed and the second answered.
        assert [a["outcome"] for a in row.attempts] == ["http_5xx", "ok"]


def test_a_streamed_text_response(case):
    with case.client.responses.stream(model=case.model, input=QUESTION) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()

    assert_a_text_answers_events(kinds)
    assert (final.status, final.output_text) == ("completed", CHAT_ANSWER)
    details = final.usage.input_tokens_details
    assert (details.cached_tokens, details.cache_write_tokens) == (case.family.cache_reads, case.family.cache_writes)
    assert final.usage.output_tokens_details.reasoning_tokens == case.family.reasoning_tokens
    assert case.log_row().streamed is True


def _answer(case: Case, stream: bool, **request):
    """The response to ``request``, asked for whole or streamed."""
    if not stream:
        return case.client.responses.create(model=case.model, **request)
    with case.client.responses.stream(model=case.model, **request) as events:
        return events.get_final_response()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_function_tool_round_trip(case, stream):
    case.configure(tool_call=TOOL["name"])
    first = _answer(case, stream, input=QUESTION, tools=[TOOL])

    [call] = first.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", TOOL["name"], TOOL_ARGUMENTS)
    assert call.call_id and first.status == "completed"

    case.configure(tool_call=None)
    output = {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT}
    second = _answer(case, stream, input=[output], tools=[TOOL], previous_response_id=first.id)

    assert (second.output_text, second.previous_response_id) == (CHAT_ANSWER, first.id)
    expected = case.expected_tool_turns([(call.call_id, TOOL["name"], TOOL_ARGUMENTS, TOOL_RESULT)])
    assert case.family.tool_turns(case.sent()) == expected
    case.log_row(2)


def test_parallel_function_calls_and_their_outputs_reach_the_upstream_together(case):
    calls = [("call_a", TOOL["name"], {"query": "a"}, "A"), ("call_b", TOOL["name"], {"query": "b"}, "B")]
    items = [{"role": "user", "content": QUESTION}]
    items += [{"type": "function_call", "call_id": c, "name": n, "arguments": json.dumps(a)} for c, n, a, _ in calls]
    items += [{"type": "function_call_output", "call_id": c, "output": r} for c, _, _, r in calls]

    response = case.client.responses.create(model=case.model, input=items, tools=[TOOL])

    assert response.output_text == CHAT_ANSWER
    assert case.family.tool_turns(case.sent()) == case.expected_tool_turns(calls)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_previous_response_id_continues_the_conversation(case, stream):
    first = case.client.responses.create(model=case.model, input="Hello")
    second = _answer(case, stream, input=QUESTION, previous_response_id=first.id)

    assert second.output_text == CHAT_ANSWER
    _, turns = case.family.conversation(case.sent())
    assert turns == [("user", "Hello"), ("assistant", CHAT_ANSWER), ("user", QUESTION)]


def test_an_input_image_reaches_the_upstream_inline(case):
    content = [
        {"type": "input_text", "text": "What is on this badge?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}", "detail": "low"},
    ]
    response = case.client.responses.create(model=case.model, input=[{"role": "user", "content": content}])

    assert response.output_text == CHAT_ANSWER
    _, turns = case.family.conversation(case.sent())
    assert turns == [("user", "What is on this badge?")]
    assert PIXEL in json.dumps(case.sent())


def test_max_output_tokens_reaches_the_upstream_and_a_cut_answer_is_incomplete(case):
    cut = case.client.responses.create(model=case.model, input=QUESTION, max_output_tokens=3)

    assert case.sent_limit() == 3
    assert (cut.status, cut.incomplete_details.reason, cut.max_output_tokens) == ("incomplete", "max_output_tokens", 3)
    assert cut.output_text == " ".join(CHAT_ANSWER.split(" ")[:3])
    case.log_row()


def test_a_streamed_answer_cut_by_max_output_tokens_ends_incomplete(case):
    with case.client.responses.stream(model=case.model, input=QUESTION, max_output_tokens=3) as stream:
        events = list(stream)

    assert case.sent_limit() == 3
    last = events[-1]
    assert (last.type, last.response.status, last.response.incomplete_details.reason) == (
        "response.incomplete",
        "incomplete",
        "max_output_tokens",
    )
    assert last.response.output_text == " ".join(CHAT_ANSWER.split(" ")[:3])


class LaunchCode(pydantic.BaseModel):
    """The shape JSON_ANSWER has."""

    code: str
    source: str


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_structured_output_follows_the_schema_or_is_refused_where_the_provider_has_no_json_mode(case, stream):
    if case.family.json_schema is None:
        with pytest.raises(openai.BadRequestError, match="no JSON mode"):
            case.client.responses.parse(model=case.model, input=QUESTION, text_format=LaunchCode)
        assert case.upstream.calls(case.family.whole) == 0
        return
    if stream:
        with case.client.responses.stream(model=case.model, input=QUESTION, text_format=LaunchCode) as events:
            parsed = events.get_final_response()
    else:
        parsed = case.client.responses.parse(model=case.model, input=QUESTION, text_format=LaunchCode)

    assert parsed.output_text == JSON_ANSWER
    assert parsed.output_parsed == LaunchCode.model_validate_json(JSON_ANSWER)
    assert (parsed.text.format.type, parsed.text.format.name) == ("json_schema", "LaunchCode")
    schema = case.family.json_schema(case.sent())
    assert set(schema["properties"]) == {"code", "source"} and schema["required"] == ["code", "source"]
    if case.model == ROUTE:
        # The first target (Anthropic) has no JSON mode: it is passed over, never called, and
        # its refusal counts toward no cooldown.
        [row] = wait_for_logs(1, project=case.project)
        assert [a["outcome"] for a in row.attempts] == ["unsupported", "ok"]


def test_a_client_that_leaves_mid_stream_ends_the_upstream_call_and_is_logged(case, v1):
    case.configure(stall_after=4)
    body = {"model": case.model, "input": QUESTION, "stream": True}
    with v1(case.client.api_key).stream("POST", "/responses", json=body) as answer:
        for line in answer.iter_lines():
            if line.startswith("event: response.output_text.delta"):
                break  # the answer had begun: the client hangs up

    assert case.upstream.wait_for_disconnects(1)
    [row] = wait_for_logs(1, project=case.project)
    assert (row.endpoint, row.status_code, row.streamed) == ("responses", 499, True)


STAFF_NOTE = "# Falcon staff\n\nThe Project Falcon launch is staffed by the orbital support team on call.\n"
CITING = "The orbital support team staffs the launch [1]."


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_application_grounds_its_answer_in_a_file_it_uploaded_and_the_answer_cites_it(case, ingesting, stream):
    """What an application writes with the official client alone: a file uploaded into a vector
    store of its own, searched, then a response with `file_search` whose citation names it."""
    client = case.client
    vector_store = client.vector_stores.create(name="staff")
    attached = client.vector_stores.files.upload_and_poll(
        vector_store_id=vector_store.id, file=("falcon-staff.md", STAFF_NOTE.encode()), poll_interval_ms=100
    )
    assert (attached.status, attached.last_error) == ("completed", None)
    assert client.files.retrieve(attached.id).filename == "falcon-staff.md"

    [found] = client.vector_stores.search(vector_store_id=vector_store.id, query="Who staffs the launch?").data
    assert (found.file_id, found.filename) == (attached.id, "falcon-staff.md")
    assert "orbital support team" in found.content[0].text

    case.configure(answer=CITING)
    request = {
        "model": case.model,
        "input": "Who staffs the Project Falcon launch?",
        "tools": [{"type": "file_search", "vector_store_ids": [vector_store.id]}],
    }
    if stream:
        with client.responses.stream(**request) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**request)

    search, message = response.output
    assert (search.type, search.status, response.output_text) == ("file_search_call", "completed", CITING)
    [citation] = message.content[0].annotations
    assert (citation.type, citation.file_id, citation.filename) == ("file_citation", attached.id, "falcon-staff.md")
    assert "orbital support team" in json.dumps(case.sent())  # the passage reached the family's upstream
    # The search's query embedding is on its own row.
    assert wait_for_logs(1, project=case.project, endpoint="vector_stores", embedding_tokens__gt=0)
    [answered] = wait_for_logs(1, project=case.project, endpoint="responses")
    assert (answered.status_code, answered.model, answered.streamed) == (200, case.family.model, stream)
    assert answered.rag_hits == 1 and answered.cost_micros > 0
