"""A streamed chat as OpenAI's typed Responses events, in order and numbered. Pure, no
database."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.clients.responses_events import ResponseEvents, sse
from gateway.clients.responses_output import FileSearch, file_search_item
from tests.gateway.clients.test_responses_output import JSON, USAGE, request


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"choices": choices, **extra}


def stream(chunks: list[dict], **fields) -> list[dict]:
    events = ResponseEvents(request(**fields), response_id="resp_s", created_at=1, model="alias")
    out = events.opening()
    for each in chunks:
        out += events.chunk(each)
    return out + events.finished()


def test_text_then_a_tool_call_stream_in_order_numbered():
    events = stream(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Let me "}),
            chunk({"content": "look."}),
            chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, "tool_calls"),
            chunk(usage=USAGE),
        ]
    )
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[2]["item"]["status"] == "in_progress" and events[9]["item"]["arguments"] == ""
    assert events[6]["text"] == "Let me look." and events[12]["arguments"] == '{"a": 1}'
    assert [event["output_index"] for event in (events[2], events[8], events[9], events[13])] == [0, 0, 1, 1]
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output_text"] == "Let me look." and final["usage"]["input_tokens"] == 12
    assert final["output"][1]["status"] == "completed"


def test_a_cut_stream_ends_incomplete():
    events = stream([chunk({"content": "One"}, "length")], max_output_tokens=1)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_failed_stream_closes_its_item_and_ends_failed():
    events = ResponseEvents(request(), response_id="resp_f", created_at=1, model="alias")
    events.opening()
    events.chunk(chunk({"content": "Half"}))
    failed = events.failed({"message": "upstream failed", "code": "upstream_error"})
    assert [event["type"] for event in failed][-2:] == ["response.output_item.done", "response.failed"]
    assert failed[-1]["response"]["status"] == "failed"
    assert failed[-1]["response"]["error"] == {"code": "upstream_error", "message": "upstream failed"}


def test_an_event_is_one_server_sent_event_named_by_its_type():
    frame = sse({"type": "response.created", "sequence_number": 0})
    name, data, end = frame.decode().split("\n", 2)
    assert name == "event: response.created" and json.loads(data.removeprefix("data: "))["sequence_number"] == 0
    assert end == "\n"


DELTA = st.fixed_dictionaries(
    {},
    optional={
        "content": JSON,
        "tool_calls": st.lists(
            st.fixed_dictionaries({}, optional={"index": JSON, "id": JSON, "function": JSON}) | JSON, max_size=2
        ),
    },
)
CHUNK = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries({}, optional={"index": JSON, "delta": DELTA | JSON, "finish_reason": JSON}) | JSON,
            max_size=2,
        )
        | JSON,
        "usage": JSON,
    },
)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(chunks=st.lists(CHUNK, max_size=5))
def test_whatever_an_upstream_streams_the_events_end_and_serialise(chunks):
    """An upstream (a custom OpenAI-compatible server) may send any JSON in its chunks: the
    events still end with one `response.*` closing event, every one serialisable."""
    events = stream(chunks)
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    for event in events:
        sse(event)


# A searched response's first events: the search's item whole, then the message's opening.
SEARCH_OPENING = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.file_search_call.in_progress",
    "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.output_item.done",
    "response.output_item.added",
    "response.content_part.added",
]


def test_a_search_streams_its_item_first_and_the_annotations_once_the_text_is_whole():
    search = FileSearch(item=file_search_item("fs_1", ["q"], None), files=[("file-a", "a.md")])
    events = ResponseEvents(request(), response_id="resp_s", created_at=1, model="alias", search=search)
    out = events.opening()
    for text in ("Twenty days ", "[1", "]."):
        out += events.chunk(chunk({"content": text}))
    out += events.finished()

    assert [event["type"] for event in out] == [
        *SEARCH_OPENING,
        *["response.output_text.delta"] * 3,
        "response.output_text.annotation.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in out] == list(range(len(out)))
    assert out[2]["item"] == {**search.item, "status": "in_progress", "queries": []}
    assert all(event["item_id"] == "fs_1" and event["output_index"] == 0 for event in out[3:6])
    assert out[6]["item"] == search.item and out[7]["output_index"] == 1
    citation = {"type": "file_citation", "file_id": "file-a", "filename": "a.md", "index": len("Twenty days ")}
    added = out[12]
    assert (added["annotation"], added["annotation_index"], added["output_index"], added["content_index"]) == (
        citation,
        0,
        1,
        0,
    )
    final = out[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["file_search_call", "message"]
    assert final["output"][1]["content"][0]["annotations"] == [citation]
