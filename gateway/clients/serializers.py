from __future__ import annotations

from rest_framework import serializers

from gateway.clients.models import GatewayKey, Project, RequestLog, Scope
from ragmux.core.serializers import StrictInput
from retrieval.serializers import API_MAX_TOP_K


class ProjectInput(StrictInput):
    name = serializers.CharField(max_length=100)
    chat_connection_id = serializers.IntegerField()
    embedding_connection_id = serializers.IntegerField(required=False, allow_null=True, default=None)
    store_id = serializers.IntegerField(required=False, allow_null=True, default=None)
    system_prompt = serializers.CharField(
        max_length=100_000, required=False, allow_blank=True, default="", trim_whitespace=False
    )


class ProjectOutput(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = [
            "id",
            "name",
            "chat_connection_id",
            "embedding_connection_id",
            "store_id",
            "system_prompt",
            "created_at",
            "updated_at",
        ]


class KeyInput(StrictInput):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices), required=False, allow_null=True, default=None
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class KeyOutput(serializers.ModelSerializer):
    class Meta:
        model = GatewayKey
        fields = ["id", "name", "prefix", "scopes", "created_at", "last_used_at", "expires_at"]


class IssuedKeyOutput(serializers.Serializer):
    key = serializers.CharField()
    api_key = KeyOutput()


class RequestLogOutput(serializers.ModelSerializer):
    class Meta:
        model = RequestLog
        fields = [
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
            "streamed",
            "error",
            "created_at",
        ]


class ChatInput(serializers.Serializer):
    """The fields of a chat request the gateway reads; every other field goes upstream as sent."""

    model = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False)
    messages = serializers.ListField(
        child=serializers.DictField(), allow_empty=False, error_messages={"required": "messages is required"}
    )
    stream = serializers.BooleanField(required=False, default=False)


MAX_EMBEDDING_INPUTS = 2048


class RetrieveInput(serializers.Serializer):
    query = serializers.CharField(max_length=4000)
    top_k = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1)

    def validate_top_k(self, value: int | None) -> int | None:
        return None if value is None else min(value, API_MAX_TOP_K)


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
