"""A document's `attributes`: a flat JSON object of strings, numbers and booleans that searches
filter on (retrieval/filters.py), with the limits OpenAI sets on a vector store file's
attributes, so a client written for `file_search` fits as it is."""

from __future__ import annotations

import math
from typing import Any

MAX_ATTRIBUTES = 16
MAX_ATTRIBUTE_KEY_CHARS = 64
MAX_ATTRIBUTE_STRING_CHARS = 512
# Filters read `tags` as the document's tags (retrieval/filters.py): an attribute cannot take
# the name, or a filter on it would be ambiguous.
TAGS_KEY = "tags"
# Integers beyond this lose precision as JSON numbers in most clients (2**53, JavaScript's safe
# range): one is refused rather than stored as a value no client reads back the same.
MAX_SAFE_INTEGER = 2**53 - 1

AttributeValue = str | int | float | bool


class InvalidAttributes(ValueError):
    """Why a value is not a document's attributes; the message names the key at fault."""


def _has_nul(text: str) -> bool:
    return "\x00" in text


def check_key(key: Any, *, what: str = "an attribute key") -> str:
    """A key as attributes and filters name one: a non-empty string of at most
    MAX_ATTRIBUTE_KEY_CHARS characters, without NUL (PostgreSQL's text refuses it)."""
    if not isinstance(key, str):
        raise InvalidAttributes(f"{what} must be a string")
    if not key or len(key) > MAX_ATTRIBUTE_KEY_CHARS:
        raise InvalidAttributes(f"{what} must be 1 to {MAX_ATTRIBUTE_KEY_CHARS} characters")
    if _has_nul(key):
        raise InvalidAttributes(f"{what} must not contain NUL characters")
    return key


def check_scalar(value: Any, *, where: str) -> AttributeValue:
    """A string (at most MAX_ATTRIBUTE_STRING_CHARS, no NUL), a finite number or a boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value) > MAX_ATTRIBUTE_STRING_CHARS:
            raise InvalidAttributes(f"{where} is longer than {MAX_ATTRIBUTE_STRING_CHARS} characters")
        if _has_nul(value):
            raise InvalidAttributes(f"{where} must not contain NUL characters")
        return value
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise InvalidAttributes(f"{where} is beyond ±{MAX_SAFE_INTEGER} (2^53 - 1)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidAttributes(f"{where} must be a finite number")
        return value
    raise InvalidAttributes(f"{where} must be a string, a number or a boolean")


def check_attributes(value: Any) -> dict[str, AttributeValue]:
    """``value`` as a document's attributes, or :class:`InvalidAttributes`."""
    if not isinstance(value, dict):
        raise InvalidAttributes("attributes must be a JSON object")
    if len(value) > MAX_ATTRIBUTES:
        raise InvalidAttributes(f"attributes hold at most {MAX_ATTRIBUTES} keys ({len(value)} given)")
    checked = {}
    for key, item in value.items():
        check_key(key)
        if key == TAGS_KEY:
            raise InvalidAttributes(f'"{TAGS_KEY}" is reserved: filters read it as the document\'s tags')
        checked[key] = check_scalar(item, where=f'attribute "{key}"')
    return checked
