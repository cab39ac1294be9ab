"""Search filters in the shape of OpenAI's `file_search` `filters`: a comparison
``{"type": "eq", "key": "customer", "value": "acme"}`` or a compound
``{"type": "and", "filters": [...]}``, checked strictly and compiled to a condition on a
document's row (its `attributes`, and its `tags` under the key ``tags``).

Pure: no database. The SQL is a string with ``%s`` placeholders and its parameters, for the
statements of retrieval.sql and retrieval.bm25 to embed.

Meaning, for a document (every chunk of a document passes or fails with it):

- ``eq``/``ne``: the attribute equals / does not equal the value (a number equals a number of
  the same value, ``1`` and ``1.0`` alike; a boolean only a boolean);
- ``gt``, ``gte``, ``lt``, ``lte``: numbers by value, strings by code point (ISO dates order
  right); an attribute of another type never compares;
- ``in``/``nin``: the attribute equals one / none of a list's values;
- a document without the attribute fails every comparison except ``ne`` and ``nin``;
- under the key ``tags``: ``eq`` a tag the document has, ``ne`` one it lacks, ``in`` any of
  them, ``nin`` none (strings only; the range operators do not apply to tags).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stores.attributes import TAGS_KEY, InvalidAttributes, check_key, check_scalar

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
RANGES = ("gt", "gte", "lt", "lte")
LISTS = ("in", "nin")
# The deepest nesting of compounds a filter may have (a comparison at the top is depth 0).
MAX_FILTER_DEPTH = 5
# The most comparisons and compounds one filter may hold in all.
MAX_FILTER_NODES = 64
# The most values an `in` or `nin` list may hold.
MAX_FILTER_LIST = 100

_SQL_RANGE = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class InvalidFilter(ValueError):
    """Why a value is not a filter; the message names where in it the fault is."""


@dataclass(frozen=True)
class Comparison:
    type: str
    key: str
    value: Any


@dataclass(frozen=True)
class Compound:
    type: str
    filters: tuple[Filter, ...]


Filter = Comparison | Compound


def _fields(node: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(node) - set(allowed), key=str)
    if unknown:
        raise InvalidFilter(
            f"{where} has an unknown field {unknown[0]!r} (a {node['type']} takes {', '.join(allowed)})"
        )
    missing = [name for name in allowed if name not in node]
    if missing:
        raise InvalidFilter(f"{where} lacks {missing[0]!r}")


def _value(kind: str, key: str, value: Any, where: str) -> Any:
    try:
        if kind in LISTS:
            if not isinstance(value, list) or not value:
                raise InvalidFilter(f"{where}: the value of {kind} is a non-empty list")
            if len(value) > MAX_FILTER_LIST:
                raise InvalidFilter(f"{where}: {kind} takes at most {MAX_FILTER_LIST} values ({len(value)} given)")
            items = tuple(check_scalar(item, where=f"{where}: value {n}") for n, item in enumerate(value))
            if any(isinstance(item, bool) for item in items):
                raise InvalidFilter(f"{where}: {kind} takes strings and numbers (compare a boolean with eq)")
            if key == TAGS_KEY and not all(isinstance(item, str) for item in items):
                raise InvalidFilter(f"{where}: tags are strings")
            return items
        scalar = check_scalar(value, where=f"{where}: the value")
    except InvalidAttributes as exc:
        raise InvalidFilter(str(exc)) from None
    if kind in RANGES and isinstance(scalar, bool):
        raise InvalidFilter(f"{where}: {kind} compares numbers or strings, not booleans")
    if key == TAGS_KEY and (kind in RANGES or not isinstance(scalar, str)):
        raise InvalidFilter(f"{where}: tags take eq, ne, in or nin with strings")
    return scalar


def parse_filter(raw: Any) -> Filter:
    """``raw`` (decoded JSON) as a filter, or :class:`InvalidFilter`: unknown or missing fields,
    wrong types, a nesting deeper than MAX_FILTER_DEPTH, more than MAX_FILTER_NODES nodes or a
    list longer than MAX_FILTER_LIST are all refused, never guessed at."""
    nodes = 0

    def parse(node: Any, depth: int, where: str) -> Filter:
        nonlocal nodes
        nodes += 1
        if nodes > MAX_FILTER_NODES:
            raise InvalidFilter(f"a filter holds at most {MAX_FILTER_NODES} comparisons and compounds")
        if not isinstance(node, dict):
            raise InvalidFilter(f"{where} must be an object")
        kind = node.get("type")
        if kind in COMPOUNDS:
            _fields(node, ("type", "filters"), where)
            children = node["filters"]
            if not isinstance(children, list) or not children:
                raise InvalidFilter(f"{where}.filters must be a non-empty list")
            if depth >= MAX_FILTER_DEPTH:
                raise InvalidFilter(f"filters nest at most {MAX_FILTER_DEPTH} compounds deep")
            return Compound(
                kind, tuple(parse(child, depth + 1, f"{where}.filters[{n}]") for n, child in enumerate(children))
            )
        if kind in COMPARISONS:
            _fields(node, ("type", "key", "value"), where)
            try:
                key = check_key(node["key"], what=f"{where}.key")
            except InvalidAttributes as exc:
                raise InvalidFilter(str(exc)) from None
            return Comparison(kind, key, _value(kind, key, node["value"], where))
        raise InvalidFilter(f"{where}.type must be one of {', '.join(COMPARISONS + COMPOUNDS)}")

    return parse(raw, 0, "filters")


def as_json(node: Filter) -> dict:
    """The filter back in its wire shape (what a key's scope stores and shows)."""
    if isinstance(node, Compound):
        return {"type": node.type, "filters": [as_json(child) for child in node.filters]}
    value = list(node.value) if node.type in LISTS else node.value
    return {"type": node.type, "key": node.key, "value": value}


def all_of(*filters: Filter | None) -> Filter | None:
    """The filters ANDed (those given): a key's scope with a client's filter, which can only
    narrow it."""
    present = tuple(node for node in filters if node is not None)
    if len(present) <= 1:
        return present[0] if present else None
    return Compound("and", present)


class _Parameters:
    """The parameters of a condition being written, positional (``%s``) or named (``%(f0)s``,
    for a statement whose other parameters are named)."""

    def __init__(self, *, named: bool):
        self.named = named
        self.values: list[Any] = []

    def bind(self, value: Any) -> str:
        self.values.append(value)
        return f"%(filter_{len(self.values) - 1})s" if self.named else "%s"

    def bound(self) -> list[Any] | dict[str, Any]:
        return {f"filter_{n}": value for n, value in enumerate(self.values)} if self.named else self.values


def _contains(column: str, key: str, value: Any, p: _Parameters) -> str:
    if key == TAGS_KEY:
        return f"{column}.tags @> ARRAY[{p.bind(value)}]::varchar[]"
    return f"{column}.attributes @> {p.bind(json.dumps({key: value}))}::jsonb"


def _comparison_sql(node: Comparison, column: str, p: _Parameters) -> str:
    if node.type in ("eq", "ne"):
        condition = _contains(column, node.key, node.value, p)
        return condition if node.type == "eq" else f"NOT ({condition})"
    if node.type in LISTS:
        if node.key == TAGS_KEY:
            condition = f"{column}.tags && {p.bind(list(node.value))}::varchar[]"
        else:
            # One containment per value: each is answered by the GIN index, and ORed as bitmaps.
            condition = "(" + " OR ".join(_contains(column, node.key, item, p) for item in node.value) + ")"
        return condition if node.type == "in" else f"NOT {condition}"
    operator = _SQL_RANGE[node.type]
    kind, value = ("string", node.value) if isinstance(node.value, str) else ("number", json.dumps(node.value))
    typed = f"jsonb_typeof({column}.attributes -> {p.bind(node.key)}::text) = '{kind}'"
    if kind == "string":
        # By code point, whatever the database's collation.
        return (
            f'({typed} AND ({column}.attributes ->> {p.bind(node.key)}::text) COLLATE "C" {operator} {p.bind(value)})'
        )
    return f"({typed} AND ({column}.attributes -> {p.bind(node.key)}::text) {operator} {p.bind(value)}::jsonb)"


def _node_sql(node: Filter, column: str, p: _Parameters) -> str:
    if isinstance(node, Comparison):
        return _comparison_sql(node, column, p)
    joined = f" {node.type.upper()} ".join(f"({_node_sql(child, column, p)})" for child in node.filters)
    return f"({joined})"


def filter_sql(node: Filter, column: str = "d", *, named: bool = False) -> tuple[str, list | dict]:
    """The condition a document row (``column``, a `documents` alias) meets when it passes the
    filter: SQL with placeholders (``%s``, or ``%(filter_0)s``… with ``named``) and its
    parameters (a list in order, or a dict)."""
    parameters = _Parameters(named=named)
    condition = _node_sql(node, column, parameters)
    return condition, parameters.bound()
