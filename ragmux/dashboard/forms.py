"""What the dashboard's smaller forms share: the values typed, validated by the API's own input
serializer, and the messages to show beside each field (a service's refusal included)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rest_framework import serializers

from ragmux.core.errors import ServiceError

NON_FIELD = "non_field_errors"


def _messages(found: Any) -> list[str]:
    if isinstance(found, dict):
        return [str(m) for messages in found.values() for m in _messages(messages)]
    if isinstance(found, (list, tuple)):
        return [str(m) for m in found]
    return [str(found)]


class Form:
    def __init__(self, post=None, *, names: Iterable[str], initial: dict[str, Any] | None = None):
        self.values: dict[str, Any] = dict(initial or {})
        if post is not None:
            self.values.update({name: post.get(name, "") for name in names})
        self.errors: dict[str, list[str]] = {}

    def validated(self, serializer: type[serializers.Serializer], data: dict[str, Any]) -> dict[str, Any] | None:
        """The validated data, or None with the messages recorded beside their fields."""
        checked = serializer(data=data)
        if checked.is_valid():
            return dict(checked.validated_data)
        self.errors = {name: _messages(found) for name, found in checked.errors.items()}
        return None

    def refuse(self, error: ServiceError, *, field: str | None = None) -> None:
        """Puts a service's refusal beside the field it names, else ``field``, else above the form."""
        fields = error.extra.get("fields") or {field or NON_FIELD: [error.message]}
        self.errors = {name: _messages(found) for name, found in fields.items()}

    def error(self, field: str, message: str) -> None:
        self.errors.setdefault(field, []).append(message)

    @property
    def form_errors(self) -> list[str]:
        return self.errors.get(NON_FIELD, [])
