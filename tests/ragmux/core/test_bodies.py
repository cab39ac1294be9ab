"""The one JSON parse: what it refuses (each a 400 `invalid_json`) and what it reads as JSON does.

The endpoints that call it, admin and `/v1`, and the size cap of a body read by the ASGI server,
are tested over the whole URLconf in `tests/ragmux/test_hostile_inputs.py`.
"""

from __future__ import annotations

import json

import pytest

from ragmux.core.bodies import MAX_JSON_DEPTH, parse_json
from ragmux.core.errors import InvalidInput, status_for
from tests.helpers import partial_request


def nested(depth: int, *, brackets: str = "[]") -> bytes:
    if brackets == "[]":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def refusal(raw: bytes) -> InvalidInput:
    with pytest.raises(InvalidInput) as refused:
        parse_json(raw)
    assert (status_for(refused.value), refused.value.code) == (400, "invalid_json")
    assert refused.value.message.startswith("malformed JSON body: ")
    return refused.value


@pytest.mark.parametrize("brackets", ["[]", "{}"])
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 5000, 100_000])
def test_nesting_deeper_than_the_limit_is_refused(depth, brackets):
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in refusal(nested(depth, brackets=brackets)).message


@pytest.mark.parametrize("brackets", ["[]", "{}"])
def test_nesting_up_to_the_limit_is_read(brackets):
    raw = nested(MAX_JSON_DEPTH, brackets=brackets)
    assert parse_json(raw) == json.loads(raw)


@pytest.mark.parametrize(
    "number", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400", b"1" * 5000], ids=lambda n: n[:8].decode()
)
def test_numbers_json_cannot_carry_are_refused(number):
    refusal(b'{"messages": [], "temperature": ' + number + b"}")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"input": "a\\ud800b"}',
        b'{"input": ["fine", "\\udfff"]}',
        b'{"a\\udc00": 1}',
        b'{"messages": [{"role": "user", "content": "\\ude00\\ud83d"}]}',
        b'"\\ud83d"',
    ],
    ids=["high in a value", "low in a list", "in a key", "a pair the wrong way round", "the whole body"],
)
def test_lone_surrogates_are_refused(raw):
    assert "lone surrogate" in refusal(raw).message


def test_a_lone_surrogate_made_by_the_charset_is_refused():
    with pytest.raises(InvalidInput, match="lone surrogate"):
        parse_json(b'{"title": "\\ud800"}', encoding="unicode_escape")


def test_a_surrogate_pair_is_a_character():
    assert parse_json(b'{"content": "launch \\ud83d\\ude80"}') == {"content": "launch \N{ROCKET}"}


@pytest.mark.parametrize(
    "raw",
    [b'{"a": "\xed\xa0\x80"}', b'{"a": "\xff"}', b'{"unterminated', b"", b"\xef\xbb\xbf{}"],
    ids=["an encoded surrogate", "not UTF-8", "truncated", "empty", "a byte order mark"],
)
def test_bodies_that_are_not_json_are_refused(raw):
    refusal(raw)


def test_a_huge_string_is_read():
    content = "x" * (8 * 1024 * 1024)
    assert parse_json(json.dumps({"content": content}).encode()) == {"content": content}


def test_the_charset_is_honoured():
    assert parse_json('{"title": "café"}'.encode("latin-1"), encoding="latin-1") == {"title": "café"}


@pytest.mark.parametrize("path", ["/admin/api/login", "/v1/chat/completions"])
def test_a_body_that_never_arrives_is_answered_408_within_the_read_deadline(asgi_url, settings, path):
    settings.BODY_READ_TIMEOUT = 1
    head = f"POST {path} HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\nContent-Length: 1000"

    took, status, answer = partial_request(asgi_url, head, b'{"username": ', wait=10)

    assert status == 408, answer
    assert 1 <= took < 3
    assert b'"code":"body_timeout"' in answer.replace(b" ", b"") and b"connection: close" in answer.lower()
