from __future__ import annotations

from rest_framework import serializers

from gateway.connections.models import (
    MAX_ROUTE_TARGETS,
    PRICE_KEY_FIELDS,
    RATE_FIELDS,
    ModelConnection,
    ModelPrice,
    ProbeMode,
    ProviderType,
    Route,
    RouteKind,
    RouteStrategy,
    RouteTarget,
)
from gateway.connections.route_services import TargetSpec
from ragmux.core.serializers import StrictInput

MAX_PRICE = 100000
# Seconds a target may be given to its first byte: from a tenth of a second (less would fail every
# call) to an hour.
FIRST_BYTE_TIMEOUT_RANGE = (0.1, 3600.0)


class ConnectionSettingsInput(StrictInput):
    """What decides where and how a connection calls: a connection without its name."""

    provider_type = serializers.ChoiceField(choices=ProviderType.choices)
    base_url = serializers.CharField(max_length=2048, required=False, allow_blank=True, default="")
    model_name = serializers.CharField(max_length=128)
    dimensions = serializers.IntegerField(required=False, allow_null=True, default=None)
    api_version = serializers.CharField(max_length=32, required=False, allow_blank=True, default="")
    api_key = serializers.CharField(
        max_length=4096, required=False, allow_blank=True, default="", trim_whitespace=True, write_only=True
    )


class ConnectionInput(ConnectionSettingsInput):
    name = serializers.CharField(max_length=100)


class PriceListQuery(serializers.Serializer):
    provider_type = serializers.ChoiceField(choices=ProviderType.choices, required=False)


class ConnectionOutput(serializers.ModelSerializer):
    supports_embeddings = serializers.BooleanField(read_only=True)

    class Meta:
        model = ModelConnection
        fields = [
            "id",
            "name",
            "provider_type",
            "base_url",
            "model_name",
            "api_version",
            "dimensions",
            "api_key_masked",
            "private_upstream",
            "supports_embeddings",
            "last_test_at",
            "last_test_ok",
            "last_test_latency_ms",
            "last_test_dimensions",
            "last_test_error",
            "last_test_modes",
            "created_at",
            "updated_at",
        ]


class ConnectionTestInput(StrictInput):
    # None: what the connection is used for (see probes.connection_test).
    mode = serializers.ChoiceField(choices=ProbeMode.choices, required=False, allow_null=True, default=None)


class ConnectionTrialInput(ConnectionSettingsInput, ConnectionTestInput):
    """A connection tried before it is saved: the create body without its name, the test's mode,
    and optionally the connection being edited (whose stored key an empty ``api_key`` stands
    for)."""

    connection_id = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False, allow_null=True)


class ProbeResultOutput(serializers.Serializer):
    mode = serializers.CharField()
    ok = serializers.BooleanField()
    reply = serializers.CharField(allow_null=True, allow_blank=True)
    dimensions = serializers.IntegerField(allow_null=True)
    ranked = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField()
    error = serializers.CharField(allow_blank=True)


class ConnectionTestOutput(serializers.Serializer):
    ok = serializers.BooleanField()
    # The first mode tried; `modes` holds them all, `results` each one's outcome.
    mode = serializers.CharField()
    modes = serializers.ListField(child=serializers.CharField())
    why = serializers.CharField()
    summary = serializers.CharField()
    results = ProbeResultOutput(many=True)
    dimensions = serializers.IntegerField(allow_null=True)
    reply = serializers.CharField(allow_null=True, allow_blank=True)
    latency_ms = serializers.IntegerField()
    error = serializers.CharField(allow_blank=True)


def _money(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=14, decimal_places=6, min_value=0, max_value=MAX_PRICE, **kwargs)


class PriceValuesInput(StrictInput):
    input_per_mtok = _money(default=0)
    output_per_mtok = _money(default=0)
    cached_input_per_mtok = _money(required=False, allow_null=True, default=None)
    cache_write_per_mtok = _money(required=False, allow_null=True, default=None)
    per_search_unit = _money(required=False, allow_null=True, default=None)


class PriceCreateInput(PriceValuesInput):
    provider_type = serializers.ChoiceField(choices=ProviderType.choices)
    model = serializers.CharField(max_length=128)


class PriceOutput(serializers.ModelSerializer):
    input_per_mtok = serializers.FloatField()
    output_per_mtok = serializers.FloatField()
    cached_input_per_mtok = serializers.FloatField(allow_null=True)
    cache_write_per_mtok = serializers.FloatField(allow_null=True)
    per_search_unit = serializers.FloatField(allow_null=True)

    class Meta:
        model = ModelPrice
        fields = [
            "id",
            *PRICE_KEY_FIELDS,
            *RATE_FIELDS,
            "source",
            "created_at",
            "updated_at",
        ]


class RouteTargetInput(StrictInput):
    connection_id = serializers.IntegerField(min_value=1)
    # Empty: the connection's own model.
    model_name = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
    weight = serializers.IntegerField(min_value=1, required=False, default=1)
    first_byte_timeout = serializers.FloatField(
        min_value=FIRST_BYTE_TIMEOUT_RANGE[0],
        max_value=FIRST_BYTE_TIMEOUT_RANGE[1],
        required=False,
        allow_null=True,
        default=None,
    )

    def to_internal_value(self, data) -> TargetSpec:
        return TargetSpec(**super().to_internal_value(data))


class RouteInput(StrictInput):
    """A whole route: its targets in the order an ``ordered`` route tries them."""

    name = serializers.CharField(max_length=Route._meta.get_field("name").max_length)
    kind = serializers.ChoiceField(choices=RouteKind.choices, required=False, default=RouteKind.CHAT)
    strategy = serializers.ChoiceField(choices=RouteStrategy.choices, required=False, default=RouteStrategy.ORDERED)
    targets = RouteTargetInput(many=True, allow_empty=False, max_length=MAX_ROUTE_TARGETS)


class RouteTargetOutput(serializers.ModelSerializer):
    connection_name = serializers.CharField(source="connection.name", read_only=True)
    effective_model_name = serializers.CharField(read_only=True)

    class Meta:
        model = RouteTarget
        fields = [
            "position",
            "connection_id",
            "connection_name",
            "model_name",
            "effective_model_name",
            "weight",
            "first_byte_timeout",
        ]


class RouteOutput(serializers.ModelSerializer):
    targets = RouteTargetOutput(many=True, read_only=True)

    class Meta:
        model = Route
        fields = ["id", "name", "kind", "strategy", "targets", "created_at", "updated_at"]


class ProviderCapabilitiesOutput(serializers.Serializer):
    chat = serializers.BooleanField()
    embeddings = serializers.BooleanField()
    rerank = serializers.BooleanField()
    tools = serializers.BooleanField()
    images = serializers.BooleanField()
    streaming_usage = serializers.BooleanField()


class PresetOutput(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField()
    base_url = serializers.CharField()
    example_model = serializers.CharField()
    embeddings = serializers.BooleanField()


class ProviderTypeOutput(serializers.Serializer):
    type = serializers.CharField()
    label = serializers.CharField()
    default_base_url = serializers.CharField(allow_blank=True)
    base_url_required = serializers.BooleanField()
    capabilities = ProviderCapabilitiesOutput()
    fields = serializers.ListField(child=serializers.CharField())
    presets = PresetOutput(many=True)
