"""The dashboard's one form adapter: the values a form sends, validated by the API's own input
serializer, the service call they feed, and the messages to show beside each input (a service's
refusal included). No page reads a post or catches a refusal itself: `attempt` is the one place
a service's refusal is caught, and a button without inputs calls it directly."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from rest_framework import serializers

from ragmux.core.errors import NON_FIELD, ServiceError, flatten_validation
from retrieval.serializers import RERANK_TARGET_BOTH
from stores.serializers import WEIGHTS_BOTH_ZERO

T = TypeVar("T")

# A flattened field name (`fusion_weights.vector`, `files[0]`, `targets[1].weight`): the field,
# then the parts it names, each a key or an index.
_NAME_PARTS = re.compile(r"[^.\[\]]+")

# The input a refusal without fields of its own concerns, on the forms that have that input.
FIELD_OF_CODE = {
    "duplicate_name": "name",
    "embedding_connection_locked": "embedding_connection_id",
    "wrong_password": "current_password",
}

# Refusals the API words with its own field names, or in a validator's stock phrasing, in the
# words of the dashboard's labels. A function rewords the message it is given (which carries the
# validator's figure: DRF's "Ensure that there are no more than 6 decimal places.").
_FIGURE = re.compile(r"\d+")
IN_WORDS: dict[str, str | Callable[[str], str]] = {
    WEIGHTS_BOTH_ZERO: "Vector weight and Lexical weight cannot both be 0: give one of them a weight.",
    RERANK_TARGET_BOTH: "Choose a rerank connection or a rerank route, not both.",
    "max_decimal_places": lambda message: f"Use at most {_FIGURE.search(message)[0]} digits after the point.",
    "max_whole_digits": lambda message: f"Use at most {_FIGURE.search(message)[0]} digits before the point.",
    "max_digits": lambda message: f"Use at most {_FIGURE.search(message)[0]} digits in all.",
}


def in_words(errors: Any) -> Any:
    """A serializer's errors with each refusal in ``IN_WORDS`` said in the dashboard's words."""
    if isinstance(errors, Mapping):
        return {name: in_words(value) for name, value in errors.items()}
    if isinstance(errors, list):
        return [in_words(value) for value in errors]
    words = IN_WORDS.get(getattr(errors, "code", None), errors)
    return words(str(errors)) if callable(words) else words


@dataclass(frozen=True)
class Attempt(Generic[T]):
    """What a service call returned, or the refusal it raised instead."""

    result: T | None = None
    refusal: ServiceError | None = None


def attempt(call: Callable[[], T]) -> Attempt[T]:
    """Runs a service call. A refusal is an answer the page shows, never a failure of the page."""
    try:
        return Attempt(result=call())
    except ServiceError as refusal:
        return Attempt(refusal=refusal)


def _input_of_part(parts: Mapping[str, str], path: list[str]) -> str:
    """The input named for the longest leading part of ``path`` (``1.weight``, then ``1``), else
    the first input of the field."""
    for length in range(len(path), 0, -1):
        found = parts.get(".".join(path[:length]))
        if found is not None:
            return found
    return next(iter(parts.values()))


def json_input(text: str) -> Any:
    """What a JSON text input holds for the API: None when it is blank, the value when it parses,
    else the text itself, which the API's field then refuses in its own words."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class Form:
    """One form, filled from the request's post when it is one (a filter form, which reads a
    query, gets its values as ``initial``). ``names`` are its text inputs (an input left out of a post reads as empty),
    ``checkboxes`` are true when sent, ``lists`` take every value sent. ``nested`` names, for an
    API field made of several inputs, the input of each of its parts (the first takes a rule
    over all of them)."""

    def __init__(
        self,
        request=None,
        *,
        names: Iterable[str] = (),
        initial: Mapping[str, Any] | None = None,
        checkboxes: Iterable[str] = (),
        lists: Iterable[str] = (),
        nested: Mapping[str, Mapping[str, str]] | None = None,
    ):
        names, checkboxes, lists = tuple(names), tuple(checkboxes), tuple(lists)
        self.inputs = (*names, *checkboxes, *lists)
        self.values: dict[str, Any] = dict(initial or {})
        if request is not None and request.method == "POST":
            post = request.POST
            self.values.update({name: post.get(name, "") for name in names})
            self.values.update({name: name in post for name in checkboxes})
            self.values.update({name: post.getlist(name) for name in lists})
        self.nested = nested or {}
        self.errors: dict[str, list[str]] = {}
        # What the serializer made of the values, what the service returned, or its refusal.
        self.data: dict[str, Any] | None = None
        self.result: Any = None
        self.refusal: ServiceError | None = None

    @classmethod
    def filters(cls, request, *, names: Iterable[str]) -> Form:
        """A filter form: its values from the query string, trimmed."""
        return cls(names=names, initial={name: request.GET.get(name, "").strip() for name in names})

    @property
    def filled(self) -> dict[str, Any]:
        """The values given, the empty ones left out: what a filter form asks for."""
        return {name: value for name, value in self.values.items() if value}

    def validated(
        self, serializer: type[serializers.Serializer], data: Mapping[str, Any], *, partial: bool = False
    ) -> dict[str, Any] | None:
        """The validated data, or None with the messages recorded beside their inputs."""
        checked = serializer(data=data, partial=partial)
        valid = checked.is_valid()
        self.errors = {} if valid else self._beside_inputs(in_words(checked.errors))
        self.data = dict(checked.validated_data) if valid else None
        return self.data

    def run(self, call: Callable[[], Any], *, field: str | None = None) -> bool:
        """Calls a service, keeping what it returns as ``result``; False, with its refusal
        recorded (see `refuse`), when it refuses."""
        outcome = attempt(call)
        self.result, self.refusal = outcome.result, outcome.refusal
        if outcome.refusal is not None:
            self.refuse(outcome.refusal, field=field)
        return outcome.refusal is None

    def submit(
        self,
        serializer: type[serializers.Serializer],
        data: Mapping[str, Any],
        save: Callable[..., Any],
        *,
        field: str | None = None,
        partial: bool = False,
    ) -> bool:
        """Validates ``data`` with the API's ``serializer`` and calls ``save(**validated)``: True
        when it is saved (its return value is ``result``), else False with the messages recorded."""
        validated = self.validated(serializer, data, partial=partial)
        return validated is not None and self.run(lambda: save(**validated), field=field)

    def refuse(self, error: ServiceError, *, field: str | None = None) -> None:
        """Puts a service's refusal beside the inputs it names, else the input its code concerns,
        else ``field``, else above the form."""
        fields = error.extra.get("fields")
        if not fields:
            by_code = FIELD_OF_CODE.get(error.code)
            fields = {(by_code if by_code in self.inputs else field) or NON_FIELD: [error.message]}
        self.errors = self._beside_inputs(fields)

    def error(self, field: str, message: str) -> None:
        self.errors.setdefault(field, []).append(message)

    def _beside_inputs(self, errors: Mapping[str, Any]) -> dict[str, list[str]]:
        """Each message beside the input it concerns: a field's own input, or for a field made of
        several inputs (``nested``) the input of the part it names (``1.weight``, else ``1``), else
        the first."""
        found: dict[str, list[str]] = {}
        for name, messages in flatten_validation(errors).items():
            field, *path = _NAME_PARTS.findall(name)
            parts = self.nested.get(field)
            target = field if parts is None else _input_of_part(parts, path)
            found.setdefault(target, []).extend(messages)
        return found

    @property
    def problems(self) -> str:
        """What went wrong in one line, for a flash message: the refusal, or each input's first
        message after the input's name."""
        if self.refusal is not None:
            return self.refusal.message
        return "; ".join(f"{name}: {messages[0]}" for name, messages in self.errors.items())

    @property
    def form_errors(self) -> list[str]:
        return self.errors.get(NON_FIELD, [])
