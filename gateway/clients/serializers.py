from __future__ import annotations

import base64
import binascii
import re
from datetime import timedelta

from rest_framework import serializers

from gateway.clients.models import Endpoint, GatewayKey, Project, QueryRewrite, RequestLog, Scope
from gateway.clients.usage_reports import UsageReport, UsageSummary, WindowUsage
from gateway.clients.usage_windows import percent_of
from gateway.connections.models import Route
from gateway.connections.providers.chat_request import MESSAGE_ROLES
from ragmux.core.env import parse_duration
from ragmux.core.serializers import MAX_BIGINT, MicroDollarsField, PageQuery, StrictInput
from ragmux.core.units import micros_to_dollars
from retrieval.serializers import MAX_QUERY_CHARS, FiltersField
from stores.serializers import MAX_TOP_K

# The most routes a project may let its keys call by name.
MAX_ALLOWED_ROUTES = 100


class LimitsInput(StrictInput):
    """A project's or a key's limits (`SpendLimits`; 0 is none), each optional: one left out keeps
    its value, on a full update too."""

    rate_limit_rpm = serializers.IntegerField(min_value=0, required=False)
    rate_limit_tpm = serializers.IntegerField(min_value=0, required=False)
    budget_daily_tokens = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT, required=False)
    budget_monthly_tokens = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT, required=False)
    budget_daily_usd = MicroDollarsField(source="budget_daily_usd_micros", required=False)
    budget_monthly_usd = MicroDollarsField(source="budget_monthly_usd_micros", required=False)


# The limits as the API names them, in the order of its objects.
API_LIMIT_FIELDS = tuple(LimitsInput._declared_fields)


class LimitsOutput(serializers.ModelSerializer):
    budget_daily_usd = MicroDollarsField(source="budget_daily_usd_micros", read_only=True)
    budget_monthly_usd = MicroDollarsField(source="budget_monthly_usd_micros", read_only=True)


class ProjectInput(LimitsInput):
    """A project; its chat goes through exactly one of ``chat_connection_id`` and ``chat_route_id``.
    ``allowed_route_ids`` left out keeps the routes allowed, on a full update too."""

    name = serializers.CharField(max_length=100)
    chat_connection_id = serializers.IntegerField(required=False, allow_null=True, default=None)
    chat_route_id = serializers.IntegerField(required=False, allow_null=True, default=None)
    allowed_route_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_BIGINT), required=False, max_length=MAX_ALLOWED_ROUTES
    )
    embedding_connection_id = serializers.IntegerField(required=False, allow_null=True, default=None)
    store_id = serializers.IntegerField(required=False, allow_null=True, default=None)
    system_prompt = serializers.CharField(
        max_length=100_000, required=False, allow_blank=True, default="", trim_whitespace=False
    )
    # What a chat searches its store for: `off`, `last_turns` or `llm` (gateway.clients.query_rewrite).
    query_rewrite = serializers.ChoiceField(choices=QueryRewrite.values, required=False, default=QueryRewrite.OFF)
    # The chat connection that condenses under `llm`; null: the chat's own model.
    query_rewrite_connection_id = serializers.IntegerField(required=False, allow_null=True, default=None)


class ProjectOutput(LimitsOutput):
    allowed_route_ids = serializers.PrimaryKeyRelatedField(source="allowed_routes", many=True, read_only=True)

    class Meta:
        model = Project
        fields = [
            "id",
            "name",
            "chat_connection_id",
            "chat_route_id",
            "allowed_route_ids",
            "embedding_connection_id",
            "store_id",
            "system_prompt",
            "query_rewrite",
            "query_rewrite_connection_id",
            *API_LIMIT_FIELDS,
            "created_at",
            "updated_at",
        ]


class KeyInput(LimitsInput):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices), required=False, allow_null=True, default=None
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    # The key's document scope; null: the whole store.
    filters = FiltersField(required=False, allow_null=True, default=None)


class KeyOutput(LimitsOutput):
    class Meta:
        model = GatewayKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "filters",
            *API_LIMIT_FIELDS,
            "created_at",
            "last_used_at",
            "expires_at",
        ]


class KeySearchQuery(PageQuery):
    project = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT, required=False, source="project_id")
    revoked = serializers.BooleanField(required=False, allow_null=True, default=None)
    scope = serializers.ChoiceField(choices=Scope.choices, required=False)


class ListedKeyOutput(KeyOutput):
    """A key in the list across projects: which project it serves, and whether it was revoked."""

    project_name = serializers.CharField(source="project.name")

    class Meta(KeyOutput.Meta):
        fields = ["project_id", "project_name", *KeyOutput.Meta.fields, "revoked_at"]


class IssuedKeyOutput(serializers.Serializer):
    key = serializers.CharField()
    api_key = KeyOutput()


# Every column of the ledger, in the order of the API's objects and the CSV export's columns.
REQUEST_LOG_COLUMNS = (
    "id",
    "project_id",
    "key_id",
    "endpoint",
    "model",
    "status_code",
    "prompt_tokens",
    "completion_tokens",
    "embedding_tokens",
    "tokens_estimated",
    "cost_micros",
    "cost_source",
    "latency_ms",
    "ttfb_ms",
    "rag_hits",
    "sources",
    "rag_skipped_reason",
    "streamed",
    "error",
    "created_at",
    # Appended: a spreadsheet reading the export by column position keeps working.
    "cached_prompt_tokens",
    "cache_write_tokens",
    # A chat through a route: its name, the target that answered and every attempt.
    "route_name",
    "target",
    "attempts",
    # The tokens of its rerank (see RequestLog.rerank_tokens).
    "rerank_tokens",
    # What became of its rerank, and why when it did not rerank (see RequestLog.rerank_outcome).
    "rerank_outcome",
    "rerank_reason",
    # Its `llm` query rewrite's tokens, and why it fell back (see RequestLog.query_rewrite_tokens).
    "query_rewrite_tokens",
    "query_rewrite_reason",
)
# The CSV's columns after the JSON API's: the names a spreadsheet reader needs beside the ids
# (each read by its lookup), then the cost in dollars (REQUEST_LOG_CSV_COST, from cost_micros).
REQUEST_LOG_CSV_NAMES = {"project_name": "project__name", "key_name": "key__name"}
REQUEST_LOG_CSV_COST = "cost_usd"
REQUEST_LOG_MAX_PAGE = 500
_STATUS = re.compile(r"^(?:[1-5]xx|[1-5][0-9][0-9])$")
_CURSOR_PREFIX = "before:"


def encode_cursor(before_id: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{before_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    """The id a cursor continues before; ValueError for anything this API did not hand out."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError(cursor) from None
    number = text.removeprefix(_CURSOR_PREFIX)
    if not text.startswith(_CURSOR_PREFIX) or not number.isdigit() or not 0 < int(number) <= MAX_BIGINT:
        raise ValueError(cursor)
    return int(number)


class RequestLogQuery(StrictInput):
    """The filters of the request log, as query-string parameters."""

    project = serializers.IntegerField(required=False, min_value=1, source="project_id")
    key = serializers.IntegerField(required=False, min_value=1, source="key_id")
    model = serializers.CharField(required=False, max_length=128)
    endpoint = serializers.ChoiceField(choices=Endpoint.choices, required=False)
    # An exact status (`404`) or a class (`4xx`).
    status = serializers.CharField(required=False, max_length=3)

    def get_fields(self):
        fields = super().get_fields()
        # ISO 8601; `from` is inclusive, `to` exclusive. `from` is a Python keyword, so the two
        # cannot be declared as attributes.
        fields["from"] = serializers.DateTimeField(required=False, source="since")
        fields["to"] = serializers.DateTimeField(required=False, source="until")
        return fields

    def validate_status(self, value: str) -> tuple[int, int]:
        if not _STATUS.match(value):
            raise serializers.ValidationError("must be an HTTP status (404) or a class (4xx)")
        if value.endswith("xx"):
            low = int(value[0]) * 100
            return low, low + 99
        return int(value), int(value)

    def validate(self, data):
        if "since" in data and "until" in data and data["since"] >= data["until"]:
            raise serializers.ValidationError({"to": ["must be later than from"]})
        return data


class RequestLogPageQuery(RequestLogQuery):
    cursor = serializers.CharField(required=False, max_length=64)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=REQUEST_LOG_MAX_PAGE, default=100)

    def validate_cursor(self, value: str) -> int:
        try:
            return _decode_cursor(value)
        except ValueError:
            raise serializers.ValidationError("is not a cursor this API handed out") from None


class RequestLogOutput(serializers.ModelSerializer):
    class Meta:
        model = RequestLog
        fields = list(REQUEST_LOG_COLUMNS)


# The largest completion a chat may ask for: the providers' own fields are 32-bit integers, and
# the limits reserve what a chat may write, so a larger one is refused here, naming its field.
MAX_COMPLETION_TOKENS = 2**31 - 1


class ChatInput(serializers.Serializer):
    """The fields of a chat request the gateway reads; every other field goes upstream as sent."""

    model = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False)
    messages = serializers.ListField(
        child=serializers.DictField(), allow_empty=False, error_messages={"required": "messages is required"}
    )
    stream = serializers.BooleanField(required=False, default=False)
    max_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=MAX_COMPLETION_TOKENS)
    max_completion_tokens = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_COMPLETION_TOKENS
    )

    def validate_messages(self, messages: list[dict]) -> list[dict]:
        for index, message in enumerate(messages):
            if message.get("role") not in MESSAGE_ROLES:
                raise serializers.ValidationError(f"messages[{index}].role must be one of {', '.join(MESSAGE_ROLES)}")
        return messages


MAX_EMBEDDING_INPUTS = 2048


class RetrieveInput(serializers.Serializer):
    query = serializers.CharField(max_length=MAX_QUERY_CHARS)
    top_k = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1)
    filters = FiltersField(required=False, allow_null=True, default=None)

    def validate_top_k(self, value: int | None) -> int | None:
        return None if value is None else min(value, MAX_TOP_K)


class ChatExtrasInput(serializers.Serializer):
    """What a chat's `ragmux` object sets for its retrieval (its other fields are read where used)."""

    filters = FiltersField(required=False, allow_null=True, default=None)


# The most documents one `/v1/rerank` call ranks (what Cohere recommends sending at most).
MAX_RERANK_DOCUMENTS = 1000


class RerankInput(serializers.Serializer):
    """Cohere's rerank request: ``model`` names a rerank route or the store's rerank connection;
    ``top_n`` omitted, or past the documents, ranks every document."""

    model = serializers.CharField(max_length=Route._meta.get_field("name").max_length)
    query = serializers.CharField(max_length=MAX_QUERY_CHARS)
    documents = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        allow_empty=False,
        max_length=MAX_RERANK_DOCUMENTS,
    )
    top_n = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=MAX_RERANK_DOCUMENTS
    )
    # Cohere's v1 option: each result carries its document's text (`{"document": {"text": ...}}`).
    return_documents = serializers.BooleanField(required=False, default=False)

    def validate(self, data: dict) -> dict:
        top_n, count = data["top_n"], len(data["documents"])
        data["top_n"] = count if top_n is None else min(top_n, count)
        return data


class EmbeddingInputField(serializers.Field):
    """A string or a list of strings (token arrays are not accepted)."""

    def to_internal_value(self, data):
        texts = [data] if isinstance(data, str) else data
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise serializers.ValidationError("input must be a non-empty string or a list of non-empty strings")
        if len(texts) > MAX_EMBEDDING_INPUTS:
            raise serializers.ValidationError(f"at most {MAX_EMBEDDING_INPUTS} inputs per request")
        return texts


class EmbeddingsInput(serializers.Serializer):
    input = EmbeddingInputField()
    model = serializers.CharField(required=False, allow_blank=True, default="")
    encoding_format = serializers.ChoiceField(choices=["float", "base64"], required=False, default="float")


# The longest summary window: the day figures a year and a month back.
MAX_SUMMARY_WINDOW = timedelta(days=400)
MAX_SUMMARY_DAYS = 90


class UsageSummaryQuery(StrictInput):
    """`window` is a duration (`24h`, `30m`, `90s`); `days` the UTC days of `daily`."""

    window = serializers.CharField(required=False, max_length=32, default="24h")
    days = serializers.IntegerField(required=False, min_value=1, max_value=MAX_SUMMARY_DAYS, default=14)
    compare = serializers.BooleanField(required=False, default=False)
    by_project = serializers.BooleanField(required=False, default=False)

    def validate_window(self, value: str) -> timedelta:
        try:
            seconds = parse_duration(value)
        except ValueError:
            raise serializers.ValidationError("must be a duration such as 24h, 30m or 90s") from None
        if not 1 <= seconds <= MAX_SUMMARY_WINDOW.total_seconds():
            raise serializers.ValidationError(f"must be from 1s to {MAX_SUMMARY_WINDOW.days * 24}h")
        return timedelta(seconds=seconds)


def _dollars(micros: int) -> float:
    return float(micros_to_dollars(micros))


class WindowUsageOutput(serializers.Serializer):
    period_start = serializers.DateTimeField(source="window.start")
    resets_at = serializers.DateTimeField(source="window.resets_at")
    requests = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    tokens = serializers.IntegerField()
    cost_micros = serializers.IntegerField()
    cost_usd = serializers.SerializerMethodField()
    rate_limited = serializers.IntegerField()
    request_limit = serializers.IntegerField()
    request_percent = serializers.SerializerMethodField()
    token_limit = serializers.IntegerField()
    token_percent = serializers.SerializerMethodField()
    usd_limit = serializers.SerializerMethodField()
    usd_percent = serializers.SerializerMethodField()

    def get_cost_usd(self, usage: WindowUsage) -> float:
        return _dollars(usage.cost_micros)

    def get_request_percent(self, usage: WindowUsage) -> float:
        return percent_of(usage.requests, usage.request_limit)

    def get_token_percent(self, usage: WindowUsage) -> float:
        return percent_of(usage.tokens, usage.token_limit)

    def get_usd_limit(self, usage: WindowUsage) -> float:
        return _dollars(usage.usd_limit_micros)

    def get_usd_percent(self, usage: WindowUsage) -> float:
        return percent_of(usage.cost_micros, usage.usd_limit_micros)


class ForecastOutput(serializers.Serializer):
    daily_exhausted_at = serializers.DateTimeField(allow_null=True)
    monthly_exhausted_at = serializers.DateTimeField(allow_null=True)
    daily_usd_exhausted_at = serializers.DateTimeField(allow_null=True)
    monthly_usd_exhausted_at = serializers.DateTimeField(allow_null=True)


def usage_report_output(report: UsageReport) -> dict:
    """The report as §3.7 of the reference has it (`project_id`, or `api_key_id` for a key's),
    with each window's cost and dollar limit and the forecast of the dollar budgets beside the tokens'."""
    owner = {"api_key_id": report.api_key_id} if report.api_key_id is not None else {"project_id": report.project_id}
    return {
        **owner,
        "generated_at": serializers.DateTimeField().to_representation(report.generated_at),
        **{name: WindowUsageOutput(usage).data for name, usage in report.windows.items()},
        "forecast": ForecastOutput(report.forecast).data,
    }


def _with_dollars(figures: dict) -> dict:
    return {**figures, "cost_usd": _dollars(figures["cost_micros"])}


def usage_summary_output(summary: UsageSummary) -> dict:
    output = {
        "window": _with_dollars(summary.window),
        "total": _with_dollars(summary.total),
        "daily": [_with_dollars({**day, "day": day["day"].isoformat()}) for day in summary.daily],
        "recent": RequestLogOutput(summary.recent, many=True).data,
    }
    if summary.previous is not None:
        output["previous"] = _with_dollars(summary.previous)
    if summary.projects is not None:
        output["projects"] = [_with_dollars(project) for project in summary.projects]
    return output
