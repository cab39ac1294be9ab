"""A chat's answer as a `response` object. Pure, no database."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.clients.responses_input import ResponsesInput
from gateway.clients.responses_output import FileSearch, file_search_item, output_of, response_of_chat, usage_of

USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}}


def request(**fields) -> dict:
    checked = ResponsesInput(data={"input": "hi", "model": "alias", **fields})
    assert checked.is_valid(), checked.errors
    return checked.validated_data


def reply(message: dict, finish: str = "stop", usage: dict | None = USAGE) -> dict:
    return {"model": "alias", "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


def test_a_text_answer_is_one_message_with_its_usage():
    response = response_of_chat(
        request(), reply({"role": "assistant", "content": "Hello."}), response_id="resp_1", created_at=7
    )
    [item] = response["output"]
    assert item["content"] == [{"type": "output_text", "text": "Hello.", "annotations": []}]
    assert (response["status"], response["output_text"], response["incomplete_details"]) == (
        "completed",
        "Hello.",
        None,
    )
    assert response["usage"] == {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 17,
    }
    assert (response["id"], response["created_at"], response["model"], response["store"]) == (
        "resp_1",
        7,
        "alias",
        True,
    )


def test_tool_calls_are_function_call_items():
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    response = response_of_chat(
        request(),
        reply({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"),
        response_id="r",
        created_at=0,
    )
    [item] = response["output"]
    assert (item["type"], item["call_id"], item["name"], item["arguments"]) == ("function_call", "c1", "f", '{"a": 1}')
    assert response["output_text"] == ""


def test_a_cut_answer_is_incomplete_and_says_why():
    response = response_of_chat(
        request(max_output_tokens=3), reply({"content": "One two three"}, "length"), response_id="r", created_at=0
    )
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})


def test_the_text_format_asked_for_is_echoed():
    answer = reply({"content": '{"code": "A"}'})
    asked = {"format": {"type": "json_schema", "name": "launch", "schema": {"type": "object"}}}
    assert response_of_chat(request(text=asked), answer, response_id="r", created_at=0)["text"] == asked
    assert response_of_chat(request(), answer, response_id="r", created_at=0)["text"] == {"format": {"type": "text"}}


def test_usage_missing_or_malformed_is_none():
    assert usage_of(None) is None and usage_of({"prompt_tokens": "1", "completion_tokens": 2}) is None
    assert usage_of({"prompt_tokens": 1, "completion_tokens": 2})["input_tokens_details"] == {
        "cached_tokens": 0,
        "cache_write_tokens": 0,
    }


def test_usage_keeps_the_prompt_cache_writes_and_the_reasoning_tokens():
    usage = usage_of(
        {
            "prompt_tokens": 30,
            "completion_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 20},
            "completion_tokens_details": {"reasoning_tokens": 7},
        }
    )
    assert usage["input_tokens_details"] == {"cached_tokens": 4, "cache_write_tokens": 20}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 7}
    assert usage["total_tokens"] == 42


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries({}, optional={"content": JSON, "tool_calls": st.lists(JSON, max_size=2) | JSON})
CHOICE = st.fixed_dictionaries({}, optional={"message": MESSAGE | JSON, "finish_reason": JSON})
REPLY = st.fixed_dictionaries({}, optional={"choices": st.lists(CHOICE | JSON, max_size=2) | JSON, "usage": JSON})


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(answer=REPLY)
def test_whatever_an_upstream_answers_is_a_response(answer):
    """An upstream may answer any JSON: it is a `response`, serialisable, never a fault."""
    response = response_of_chat(request(), answer, response_id="r", created_at=0)
    assert response["status"] in ("completed", "incomplete")
    json.dumps(response)


SEARCH = FileSearch(
    item=file_search_item("fs_1", ["leave policy"], None),
    files=[("file-a", "handbook.pdf"), ("file-a", "handbook.pdf"), ("file-b", "faq.md")],
)


def test_a_searched_answer_starts_with_its_search_and_cites_its_files():
    text = "Twenty days [1]. Refunds in a week [3], see also [1, 2]."
    response = response_of_chat(
        request(), reply({"role": "assistant", "content": text}), response_id="resp_1", created_at=1, search=SEARCH
    )
    search, message = response["output"]
    assert search == {
        "type": "file_search_call",
        "id": "fs_1",
        "status": "completed",
        "queries": ["leave policy"],
        "results": None,
    }
    assert message["content"][0]["annotations"] == [
        {"type": "file_citation", "file_id": "file-a", "filename": "handbook.pdf", "index": text.index("[1]")},
        {"type": "file_citation", "file_id": "file-b", "filename": "faq.md", "index": text.index("[3]")},
        # [1, 2]: two passages of one file at one place, one annotation.
        {"type": "file_citation", "file_id": "file-a", "filename": "handbook.pdf", "index": text.index("[1, 2]")},
    ]
    assert response["output_text"] == text


def test_an_answer_citing_nothing_has_no_annotations():
    assert SEARCH.annotations("No marker here, nor [4].") == []
    [message] = output_of({"content": "Cites [1]."})  # no search: nothing to cite
    assert message["content"][0]["annotations"] == []
