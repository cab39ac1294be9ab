"""The filter parser and compiler (pure): what a filter may be, and what it is refused for."""

import pytest

from retrieval.filters import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_LIST,
    MAX_FILTER_NODES,
    Comparison,
    Compound,
    InvalidFilter,
    all_of,
    as_json,
    filter_sql,
    parse_filter,
)
from stores.attributes import MAX_ATTRIBUTE_KEY_CHARS, MAX_ATTRIBUTE_STRING_CHARS


def eq(key="customer", value="acme"):
    return {"type": "eq", "key": key, "value": value}


def nested(depth: int) -> dict:
    node = eq()
    for _ in range(depth):
        node = {"type": "and", "filters": [node]}
    return node


@pytest.mark.parametrize(
    "raw",
    [
        eq(),
        eq(value=3),
        eq(value=2.5),
        eq(value=True),
        {"type": "ne", "key": "customer", "value": "acme"},
        {"type": "gt", "key": "year", "value": 2020},
        {"type": "gte", "key": "date", "value": "2024-01-01"},
        {"type": "lt", "key": "year", "value": 2020.5},
        {"type": "lte", "key": "year", "value": 0},
        {"type": "in", "key": "customer", "value": ["acme", 3]},
        {"type": "nin", "key": "customer", "value": ["acme"]},
        {"type": "eq", "key": "tags", "value": "hr"},
        {"type": "in", "key": "tags", "value": ["hr", "legal"]},
        {"type": "or", "filters": [eq(), {"type": "and", "filters": [eq("a", 1), eq("b", False)]}]},
        nested(MAX_FILTER_DEPTH),
    ],
)
def test_a_filter_in_openai_shape_parses_and_round_trips(raw):
    assert as_json(parse_filter(raw)) == raw


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("customer = acme", "must be an object"),
        (None, "must be an object"),
        ([eq()], "must be an object"),
        ({"type": "like", "key": "a", "value": "b"}, "type must be one of"),
        ({"key": "a", "value": "b"}, "type must be one of"),
        ({"type": "eq", "key": "a"}, "lacks 'value'"),
        ({"type": "eq", "key": "a", "value": "b", "extra": 1}, "unknown field 'extra'"),
        ({"type": "and", "filters": []}, "non-empty list"),
        ({"type": "and", "filters": eq()}, "non-empty list"),
        ({"type": "and", "filters": [eq()], "key": "a"}, "unknown field 'key'"),
        (eq(key=5), "key must be a string"),
        (eq(key=""), "1 to 64 characters"),
        (eq(key="k" * (MAX_ATTRIBUTE_KEY_CHARS + 1)), "1 to 64 characters"),
        (eq(key="a\x00b"), "NUL"),
        (eq(value="a\x00b"), "NUL"),
        (eq(value="x" * (MAX_ATTRIBUTE_STRING_CHARS + 1)), "longer than 512"),
        (eq(value=None), "a string, a number or a boolean"),
        (eq(value={"a": 1}), "a string, a number or a boolean"),
        (eq(value=["a"]), "a string, a number or a boolean"),
        (eq(value=float("nan")), "finite"),
        (eq(value=2**80), r"2\^53"),
        ({"type": "gt", "key": "a", "value": True}, "not booleans"),
        ({"type": "in", "key": "a", "value": "acme"}, "non-empty list"),
        ({"type": "in", "key": "a", "value": []}, "non-empty list"),
        ({"type": "in", "key": "a", "value": [True]}, "strings and numbers"),
        ({"type": "in", "key": "a", "value": [["x"]]}, "a string, a number or a boolean"),
        ({"type": "nin", "key": "a", "value": list(range(MAX_FILTER_LIST + 1))}, "at most 100 values"),
        ({"type": "gt", "key": "tags", "value": "a"}, "tags take"),
        (eq(key="tags", value=3), "tags take"),
        ({"type": "in", "key": "tags", "value": ["a", 1]}, "tags are strings"),
        (nested(MAX_FILTER_DEPTH + 1), "nest at most"),
        ({"type": "or", "filters": [eq()] * MAX_FILTER_NODES}, "at most 64"),
    ],
)
def test_anything_else_is_refused_with_where_and_why(raw, says):
    with pytest.raises(InvalidFilter, match=says):
        parse_filter(raw)


def test_a_very_deep_filter_is_refused_without_walking_it_all():
    node = eq()
    for _ in range(5000):  # deeper than Python's recursion limit
        node = {"type": "or", "filters": [node]}
    with pytest.raises(InvalidFilter, match="nest at most"):
        parse_filter(node)


def test_all_of_ands_what_is_given_and_nothing_else():
    scope, asked = parse_filter(eq()), parse_filter(eq("year", 2024))
    assert all_of(None, None) is None
    assert all_of(scope, None) is scope
    assert all_of(None, asked) is asked
    assert all_of(scope, asked) == Compound("and", (scope, asked))


def test_the_compiled_condition_binds_every_value_as_a_parameter():
    hostile = "x'); DROP TABLE documents; --"
    node = parse_filter(
        {"type": "or", "filters": [eq(hostile, hostile), {"type": "gt", "key": hostile, "value": hostile}]}
    )
    condition, params = filter_sql(node)
    assert hostile not in condition
    assert condition.count("%s") == len(params)
    named, by_name = filter_sql(node, named=True)
    assert "%s" not in named and len(by_name) == len(params)
    assert all(f"%({name})s" in named for name in by_name)


def test_a_comparison_keeps_its_value_type():
    assert parse_filter(eq(value=1)) == Comparison("eq", "customer", 1)
    assert parse_filter({"type": "in", "key": "k", "value": ["a", 2]}).value == ("a", 2)
