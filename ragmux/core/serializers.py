"""Input serializers of the admin API: strict about what they accept.

A typo'd field silently ignored is a setting silently not applied, so unknown fields are
refused; a number where text belongs is a client bug, not text; and an integer is bounded so
it can never overflow a database column.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.core.validators import MaxValueValidator
from rest_framework import serializers

# The largest value of PostgreSQL's `integer`, the narrowest column an API integer lands in.
MAX_INTEGER = 2**31 - 1


class StrictInput(serializers.Serializer):
    def get_fields(self):
        fields = super().get_fields()
        for field in fields.values():
            if isinstance(field, serializers.IntegerField) and field.max_value is None:
                field.max_value = MAX_INTEGER
                field.validators.append(MaxValueValidator(MAX_INTEGER))
        return fields

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            errors = {name: ["unknown field"] for name in sorted(set(data) - set(self.fields))}
            for name, field in self.fields.items():
                value = data.get(name)
                if isinstance(field, serializers.CharField) and value is not None and not isinstance(value, str):
                    errors[name] = ["must be a string"]
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)
