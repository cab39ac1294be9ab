"""A `/v1/responses` request made a chat: items to messages, tools to chat tools, refusals by
name. Pure functions, no database."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.clients.responses_input import (
    ResponsesInput,
    chat_body,
    chat_messages,
    chat_tool_choice,
    chat_tools,
    file_search_of,
    input_items,
    is_response_id,
    refuse_nul,
)
from ragmux.core.errors import InvalidInput
from retrieval.filters import parse_filter
from tests.gateway.clients.test_responses_output import JSON

FUNCTION = {"type": "function", "name": "lookup", "description": "Looks up.", "parameters": {"type": "object"}}


def data(**fields) -> dict:
    checked = ResponsesInput(data={"input": "hi", **fields})
    assert checked.is_valid(), checked.errors
    return checked.validated_data


def test_a_string_is_one_user_message():
    [item] = input_items("What is the code?")
    assert (item["type"], item["role"], item["content"]) == (
        "message",
        "user",
        [{"type": "input_text", "text": "What is the code?"}],
    )
    assert item["id"].startswith("msg_")


def test_text_parts_are_one_string_and_an_image_keeps_its_parts():
    items = input_items(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": "https://example.com/x.png"},
                ],
            },
        ]
    )
    assert chat_messages("Answer in French.", items) == [
        {"role": "system", "content": "Answer in French."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "ab"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/x.png", "detail": "auto"}},
            ],
        },
    ]


def test_function_calls_after_text_join_its_assistant_message_and_outputs_are_tool_messages():
    items = input_items(
        [
            {"role": "user", "content": "Look it up"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": '{"a": 1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        ]
    )
    messages = chat_messages(None, items)
    assert messages[1] == {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": '{"a": 1}'}},
        ],
    }
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]


def test_a_tool_output_of_parts_is_their_text():
    [item] = input_items(
        [
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [{"type": "input_text", "text": "one"}, {"type": "input_image", "image_url": "u"}],
            }
        ]
    )
    assert item["output"] == "one"


def test_a_function_call_first_is_an_assistant_message_without_text():
    items = input_items([{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}])
    assert chat_messages(None, items)[0]["content"] is None


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (5, "input"),
        ([], "input"),
        ([5], "input[0]"),
        ([{"type": "item_reference", "id": "x"}], "input[0].type"),
        ([{"role": "tool", "content": "x"}], "input[0].role"),
        ([{"role": "user", "content": 5}], "input[0].content"),
        ([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}], "input[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "u", "detail": "x"}]}], None),
        ([{"type": "function_call", "call_id": 1, "name": "f", "arguments": "{}"}], "input[0].call_id"),
        ([{"type": "function_call_output", "call_id": "c", "output": {"a": 1}}], "input[0].output"),
        ([{"type": "function_call_output", "call_id": "c", "output": ["text"]}], "input[0].output"),
        ([{"role": "user", "content": "hi", "id": {"a": 1}}], "input[0].id"),
    ],
)
def test_malformed_items_are_refused_naming_the_field(value, field):
    with pytest.raises(InvalidInput) as refused:
        input_items(value)
    if field is not None:
        assert refused.value.extra["param"] == field


def test_function_tools_become_chat_tools():
    assert chat_tools([FUNCTION, {"type": "function", "name": "bare", "strict": True}]) == [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Looks up.", "parameters": {"type": "object"}},
        },
        {
            "type": "function",
            "function": {"name": "bare", "parameters": {"type": "object", "properties": {}}, "strict": True},
        },
    ]


@pytest.mark.parametrize(
    "kind", ["web_search", "web_search_preview", "code_interpreter", "computer_use_preview", "mcp"]
)
def test_tools_we_do_not_run_are_refused_by_name(kind):
    with pytest.raises(InvalidInput, match=kind):
        chat_tools([{"type": kind}])
    with pytest.raises(InvalidInput, match=kind):
        chat_tool_choice({"type": kind}, [])


SEARCH = {"type": "file_search", "vector_store_ids": ["vs_1"]}


def test_file_search_is_ours_to_run_never_offered_to_the_model():
    assert chat_tools([SEARCH, FUNCTION])[0]["function"]["name"] == "lookup" and chat_tools([SEARCH]) == []
    assert chat_tool_choice({"type": "file_search"}, [SEARCH]) == "auto"
    with pytest.raises(InvalidInput, match="file_search"):
        chat_tool_choice({"type": "file_search"}, [FUNCTION])
    body = chat_body(data(tools=[SEARCH], tool_choice="required"), [], input_items("hi"))
    assert "tools" not in body and "tool_choice" not in body


def test_the_file_search_tool_is_read_with_its_filter():
    assert file_search_of([FUNCTION]) is None
    tool = {
        **SEARCH,
        "vector_store_ids": ["vs_1", "vs_2"],
        "max_num_results": 4,
        "filters": {"type": "eq", "key": "customer", "value": "acme"},
        "ranking_options": {"ranker": "auto", "score_threshold": 0.5},
    }
    found = file_search_of([FUNCTION, tool])
    assert (found["vector_store_ids"], found["max_num_results"]) == (["vs_1", "vs_2"], 4)
    assert found["filters"] == parse_filter(tool["filters"])
    assert file_search_of([SEARCH])["filters"] is None and file_search_of([SEARCH])["max_num_results"] is None


@pytest.mark.parametrize(
    ("tool", "named"),
    [
        ({"type": "file_search"}, r"tools\[1\]\.vector_store_ids"),
        ({**SEARCH, "vector_store_ids": []}, "vector_store_ids"),
        ({**SEARCH, "vector_store_ids": [f"vs_{n}" for n in range(11)]}, "vector_store_ids"),
        ({**SEARCH, "max_num_results": 0}, "max_num_results"),
        ({**SEARCH, "max_num_results": 10**20}, "max_num_results"),
        ({**SEARCH, "filters": {"type": "eq", "key": "a"}}, "filters"),
        ({**SEARCH, "filters": "customer=acme"}, "filters"),
        ({**SEARCH, "ranking_options": {"score_threshold": 2}}, "ranking_options.score_threshold"),
        ({**SEARCH, "ranking_options": {"ranker": "best"}}, "ranking_options.ranker"),
    ],
)
def test_a_wrong_file_search_tool_is_refused_naming_its_field(tool, named):
    with pytest.raises(InvalidInput, match=named) as refused:
        file_search_of([FUNCTION, tool])
    assert refused.value.code == "invalid_request"


def test_one_file_search_tool_at_most():
    with pytest.raises(InvalidInput, match="at most one file_search") as refused:
        file_search_of([SEARCH, SEARCH])
    assert refused.value.extra["fields"] == {"tools[1]": ["at most one file_search tool"]}


def test_a_file_search_call_sent_back_as_input_is_kept_and_not_sent_upstream():
    sent_back = {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"], "results": []}
    items = input_items([sent_back, {"role": "user", "content": "and then?"}])
    assert items[0] == {**sent_back, "results": None}
    assert chat_messages(None, items) == [{"role": "user", "content": "and then?"}]
    with pytest.raises(InvalidInput, match=r"input\[0\]\.queries"):
        input_items([{"type": "file_search_call", "queries": "q"}])


def test_an_unknown_tool_and_a_tool_without_a_name_are_refused():
    with pytest.raises(InvalidInput, match="'teleport'"):
        chat_tools([{"type": "teleport"}])
    with pytest.raises(InvalidInput, match=r"tools\[0\].name"):
        chat_tools([{"type": "function"}])


def test_tool_choice():
    assert [chat_tool_choice(choice, []) for choice in ("auto", "none", "required")] == ["auto", "none", "required"]
    assert chat_tool_choice({"type": "function", "name": "f"}, []) == {"type": "function", "function": {"name": "f"}}
    with pytest.raises(InvalidInput):
        chat_tool_choice(5, [])


def test_the_chat_body_carries_tools_limits_and_sampling():
    checked = data(tools=[FUNCTION], max_output_tokens=64, temperature=0.5, top_p=0.9, stream=True)
    body = chat_body(checked, [], input_items("hi"))
    assert (body["max_completion_tokens"], body["temperature"], body["top_p"]) == (64, 0.5, 0.9)
    assert body["tool_choice"] == "auto" and body["tools"][0]["function"]["name"] == "lookup"
    assert body["stream_options"] == {"include_usage": True}
    assert "tools" not in chat_body(data(), [], input_items("hi"))


SCHEMA = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}


@pytest.mark.parametrize(
    ("text", "response_format"),
    [
        (None, None),
        ({"format": {"type": "text"}}, None),
        ({"verbosity": "low"}, None),
        ({"format": {"type": "json_object"}}, {"type": "json_object"}),
        (
            {"format": {"type": "json_schema", "name": "launch", "schema": SCHEMA, "strict": True}},
            {"type": "json_schema", "json_schema": {"name": "launch", "schema": SCHEMA, "strict": True}},
        ),
        (
            {"format": {"type": "json_schema", "name": "launch-2", "schema": SCHEMA, "description": "A code."}},
            {"type": "json_schema", "json_schema": {"name": "launch-2", "schema": SCHEMA, "description": "A code."}},
        ),
    ],
)
def test_the_text_format_is_the_chats_response_format(text, response_format):
    body = chat_body(data(text=text), [], input_items("hi"))
    assert body.get("response_format") == response_format


@pytest.mark.parametrize(
    "fields",
    [
        {"text": {"format": {"type": "xml"}}},
        {"text": {"format": "json_object"}},
        {"text": {"format": {"type": "json_schema", "schema": SCHEMA}}},
        {"text": {"format": {"type": "json_schema", "name": "has spaces", "schema": SCHEMA}}},
        {"text": {"format": {"type": "json_schema", "name": "x" * 65, "schema": SCHEMA}}},
        {"text": {"format": {"type": "json_schema", "name": "launch", "schema": "object"}}},
        {"text": {"format": {"type": "json_schema", "name": "launch", "schema": SCHEMA, "strict": "yes"}}},
        {"text": {"format": {"type": "json_schema", "name": "launch", "schema": SCHEMA, "description": 5}}},
        {"max_output_tokens": 10**30},
        {"temperature": 3},
        {"top_p": "high"},
        {"metadata": {f"k{n}": "v" for n in range(17)}},
        {"metadata": {"k" * 65: "v"}},
        {"store": "maybe"},
        {"text": {"format": {"type": "json_schema"}}},
        {"previous_response_id": "x" * 65},
        {"input": None},
    ],
)
def test_fields_out_of_range_are_refused(fields):
    assert not ResponsesInput(data={"input": "hi", **fields}).is_valid()


def test_store_is_true_unless_false():
    assert data()["store"] is True and data(store=None)["store"] is True and data(store=False)["store"] is False


def test_a_nul_anywhere_is_refused():
    refuse_nul({"input": "fine", "tools": [{"parameters": {"a": ["ok"]}}]})
    for body in ({"input": "a\x00"}, {"tools": [{"parameters": {"a\x00": 1}}]}, {"x": [["\x00"]]}):
        with pytest.raises(InvalidInput):
            refuse_nul(body)


def test_response_ids():
    assert is_response_id("resp_abc-1") and not is_response_id("a/b") and not is_response_id("x" * 65)
    assert not is_response_id("") and not is_response_id("a\x00")


KEYS = st.sampled_from(["type", "role", "content", "text", "call_id", "name", "arguments", "output", "id"])
ITEM_LIKE = st.dictionaries(KEYS, JSON | st.sampled_from(["message", "user", "function_call", "input_text"]))


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(value=JSON | st.lists(ITEM_LIKE | JSON, max_size=4), tools=st.lists(ITEM_LIKE, max_size=3))
def test_any_json_is_translated_or_refused_never_a_fault(value, tools):
    try:
        chat_messages(None, input_items(value))
    except InvalidInput:
        pass
    try:
        chat_tools(tools)
    except InvalidInput:
        pass
