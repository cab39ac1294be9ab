"""Input serializers of the admin API: strict about what they accept.

A typo'd field silently ignored is a setting silently not applied, so unknown fields are
refused; a number where text belongs is a client bug, not text; and an integer is bounded so
it can never overflow a database column.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from django.core.validators import MaxValueValidator
from django.db.models import QuerySet
from rest_framework import serializers

from ragmux.core.audit import OBJECT_TYPES, audit_list
from ragmux.core.models import AuditEntry
from ragmux.core.paging import PAGE_SIZE, without_page
from ragmux.core.roles import ROLES
from ragmux.core.units import DOLLAR_PLACES, dollars_to_micros, micros_to_dollars

# The largest value of PostgreSQL's `integer`, the narrowest column an API integer lands in.
MAX_INTEGER = 2**31 - 1
# The largest value of PostgreSQL's `bigint` (ids, byte counts, budgets).
MAX_BIGINT = 2**63 - 1


def _not_strings(fields: Mapping[str, serializers.Field], data: Mapping) -> dict[str, list[str]]:
    """The text fields of ``data`` holding something else than a string."""
    return {
        name: ["must be a string"]
        for name, field in fields.items()
        if isinstance(field, serializers.CharField) and data.get(name) is not None and not isinstance(data[name], str)
    }


class TypedInput(serializers.Serializer):
    """Text fields take only strings (DRF's CharField would take 5 as "5"); other fields are
    ignored: OpenAI's shapes (`/v1`), which newer clients extend."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping) and (errors := _not_strings(self.fields, data)):
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


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
            errors.update(_not_strings(self.fields, data))
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class MicroDollarsField(serializers.DecimalField):
    """An amount of money: decimal dollars in the API (at most six places, never negative),
    integer micro-dollars in the database (`ragmux.core.units`), bounded by a `bigint` column."""

    def __init__(self, **kwargs):
        super().__init__(
            max_digits=len(str(MAX_BIGINT)),
            decimal_places=DOLLAR_PLACES,
            min_value=Decimal(0),
            max_value=micros_to_dollars(MAX_BIGINT),
            **kwargs,
        )

    def run_validation(self, data=serializers.empty) -> int | None:
        # Converted after the bounds, which are in dollars, have been checked.
        dollars = super().run_validation(data)
        return None if dollars is None else dollars_to_micros(dollars)

    def to_representation(self, value: int) -> float:
        return float(micros_to_dollars(value))


# Django's hashers take any length; this bound only keeps a request from hashing megabytes.
MAX_PASSWORD = 1024


def _password(**kwargs) -> serializers.CharField:
    return serializers.CharField(max_length=MAX_PASSWORD, trim_whitespace=False, **kwargs)


class PasswordChangeInput(StrictInput):
    current_password = _password()
    new_password = _password()


class UserCreateInput(StrictInput):
    username = serializers.CharField(max_length=150)
    # Blank: a password is generated and returned once.
    password = _password(required=False, allow_blank=True, default="")
    role = serializers.ChoiceField(choices=ROLES, default="viewer")


class UserUpdateInput(StrictInput):
    role = serializers.ChoiceField(choices=ROLES, required=False)
    is_active = serializers.BooleanField(required=False)


class PasswordResetInput(StrictInput):
    # Blank: a password is generated and returned once.
    password = _password(required=False, allow_blank=True, default="")


class PageQuery(serializers.Serializer):
    """The page of an offset-paged list a query asks for (`ragmux.core.paging`). A list allowing
    larger pages declares its own ``page_size``."""

    page = serializers.IntegerField(min_value=1, max_value=MAX_INTEGER, default=1)
    page_size = serializers.IntegerField(min_value=1, max_value=200, default=PAGE_SIZE)


class AuditFilters(serializers.Serializer):
    """What the audit trail's page and its export filter by."""

    actor = serializers.CharField(max_length=150, required=False)
    # A prefix: "login." for every sign-in outcome, "document" for everything done to documents.
    action = serializers.CharField(max_length=AuditEntry._meta.get_field("action").max_length, required=False)
    object_type = serializers.ChoiceField(choices=OBJECT_TYPES, required=False)
    object_id = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT, required=False)
    document = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT, required=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class AuditQuery(AuditFilters, PageQuery):
    page_size = serializers.IntegerField(min_value=1, max_value=500, default=PAGE_SIZE)


def audit_entries(query: dict) -> QuerySet[AuditEntry]:
    """The entries an `AuditQuery`'s (or `AuditFilters`') validated data filters for, every page
    of them."""
    return audit_list(**without_page(query))


class NoInput(StrictInput):
    """The body of an operation that takes none: absent, or an empty JSON object."""


def refuse_body(request) -> None:
    """Refuses a body sent to an operation that takes none (400), so a client's mistaken fields
    are never taken as applied: a field is unknown, a body that is no object is invalid."""
    NoInput(data=request.data).is_valid(raise_exception=True)
