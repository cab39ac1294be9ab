from __future__ import annotations

from rest_framework import serializers

from ragmux.core.serializers import PageQuery, StrictInput
from stores.attributes import InvalidAttributes, check_attributes
from stores.models import (
    STORE_SETTINGS,
    Document,
    DocumentStatus,
    FusionRule,
    RagStore,
    RerankBackend,
    SearchBackend,
    SearchMode,
    store_defaults,
)
from stores.rebuild import lexical_index_state
from stores.selectors import DOCUMENT_LIST_FIELDS, store_limits

# Tesseract's language codes (eng, chi_sim, frk…), several joined by "+".
OCR_LANGUAGE_PATTERN = r"^[a-z][a-z_]{1,15}(\+[a-z][a-z_]{1,15}){0,7}$"
# For these settings 0 means "the default", as in the original product.
ZERO_MEANS_DEFAULT = ("chunk_size", "top_k", "rerank_candidates")
# The most hits a search returns: a store's top_k, and what a search's own top_k is clamped to.
MAX_TOP_K = 50


# The refusal of two zero fusion weights, which the dashboard says in its own words.
WEIGHTS_BOTH_ZERO = "weights_both_zero"


class FusionWeights(StrictInput):
    """Weights of the two ranked lists in fusion; the same rule for store settings and searches."""

    vector = serializers.FloatField(min_value=0, max_value=100)
    lexical = serializers.FloatField(min_value=0, max_value=100)

    def to_internal_value(self, data):
        values = super().to_internal_value(data)
        # A partial update of the store still replaces the weights whole: both are needed.
        missing = [name for name in ("vector", "lexical") if name not in values]
        if missing:
            raise serializers.ValidationError({name: ["This field is required."] for name in missing})
        if values["vector"] == 0 and values["lexical"] == 0:
            raise serializers.ValidationError("fusion_weights cannot both be 0", code=WEIGHTS_BOTH_ZERO)
        return values


def fusion_field(**kwargs) -> serializers.ChoiceField:
    """The fusion rule, refused with the valid ones named; the same for store settings and searches."""
    return serializers.ChoiceField(
        choices=FusionRule.choices,
        error_messages={"invalid_choice": f'"{{input}}" is not a fusion rule: valid are {", ".join(FusionRule)}'},
        **kwargs,
    )


class StoreSettingsInput(StrictInput):
    """Every setting of a store; on create and PUT an omitted one takes its default."""

    embedding_connection_id = serializers.IntegerField()
    chunk_size = serializers.IntegerField(min_value=0, max_value=20000)
    chunk_overlap = serializers.IntegerField(min_value=0, max_value=19999)
    chunking_strategy = serializers.CharField(max_length=32)
    contextual_chunks = serializers.BooleanField()
    top_k = serializers.IntegerField(min_value=0, max_value=MAX_TOP_K)
    search_mode = serializers.ChoiceField(choices=SearchMode.choices)
    search_backend = serializers.ChoiceField(choices=SearchBackend.choices)
    fts_config = serializers.CharField(max_length=63)
    index_config = serializers.CharField(max_length=63)
    fusion_weights = FusionWeights()
    fusion = fusion_field()
    typo_tolerance = serializers.BooleanField()
    rerank = serializers.BooleanField()
    rerank_backend = serializers.ChoiceField(choices=RerankBackend.choices)
    rerank_connection_id = serializers.IntegerField(allow_null=True, min_value=1, max_value=2**63 - 1)
    rerank_route_id = serializers.IntegerField(allow_null=True, min_value=1, max_value=2**63 - 1)
    rerank_candidates = serializers.IntegerField(min_value=0, max_value=100)
    max_distance = serializers.FloatField(min_value=0, max_value=2)
    max_documents = serializers.IntegerField(min_value=0)
    max_bytes = serializers.IntegerField(min_value=0, max_value=2**63 - 1)
    ocr = serializers.BooleanField()
    ocr_language = serializers.RegexField(
        OCR_LANGUAGE_PATTERN,
        max_length=63,
        error_messages={"invalid": "ocr_language is Tesseract language codes joined by + (eng, fra+eng)"},
    )

    def validate_chunk_size(self, value: int) -> int:
        if value and value < 200:
            raise serializers.ValidationError("chunk_size must be between 200 and 20000 characters")
        return value

    def validate(self, attrs: dict) -> dict:
        for name in ZERO_MEANS_DEFAULT:
            if attrs.get(name) == 0:
                attrs[name] = store_defaults()[name]
        return attrs


class StoreCreateInput(StoreSettingsInput):
    name = serializers.CharField(max_length=100)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            if name not in ("name", "embedding_connection_id"):
                field.required = False


class StoreOutput(serializers.ModelSerializer):
    embedding_connection_id = serializers.IntegerField()
    rerank_connection_id = serializers.IntegerField(allow_null=True)
    rerank_route_id = serializers.IntegerField(allow_null=True)
    document_count = serializers.IntegerField(read_only=True)
    chunk_count = serializers.IntegerField(read_only=True)
    bytes_used = serializers.IntegerField(read_only=True)
    limits = serializers.SerializerMethodField()
    lexical_index = serializers.SerializerMethodField()

    class Meta:
        model = RagStore
        fields = [
            "id",
            "name",
            "dimensions",
            *STORE_SETTINGS,
            "document_count",
            "chunk_count",
            "bytes_used",
            "limits",
            "lexical_index",
            "created_at",
            "updated_at",
        ]

    def get_limits(self, store: RagStore) -> dict:
        limits = store_limits(store)
        return {"max_documents": limits.documents, "max_bytes": limits.bytes}

    def get_lexical_index(self, store: RagStore) -> dict:
        return lexical_index_state(store).as_dict()


class AttributesField(serializers.JSONField):
    """A document's attributes (stores/attributes.py). With ``binary`` the value arrives as JSON
    text (a multipart form's field) and is parsed first."""

    def to_internal_value(self, data):
        if self.binary and not isinstance(data, str | bytes):
            raise serializers.ValidationError("attributes must be a JSON object written as text")
        value = super().to_internal_value(data)
        try:
            return check_attributes(value)
        except InvalidAttributes as exc:
            raise serializers.ValidationError(str(exc)) from None


class DocumentUpdateInput(StrictInput):
    """What of a document can be edited after its upload: its metadata, not its text."""

    attributes = AttributesField(required=False)
    tags = serializers.ListField(child=serializers.CharField(max_length=128), max_length=64, required=False)


class DocumentOutput(serializers.ModelSerializer):
    rag_store_id = serializers.IntegerField(source="store_id")

    class Meta:
        model = Document
        # Exactly what the list selector loads (the original bytes are never read for output).
        fields = ["rag_store_id" if name == "store_id" else name for name in DOCUMENT_LIST_FIELDS]


class DocumentListQuery(PageQuery):
    status = serializers.ChoiceField(choices=DocumentStatus.choices, required=False)


class BackendStatusOutput(serializers.Serializer):
    id = serializers.CharField()
    available = serializers.BooleanField()
    reason = serializers.CharField(allow_blank=True)


class TextSearchConfigOutput(serializers.Serializer):
    name = serializers.CharField()
