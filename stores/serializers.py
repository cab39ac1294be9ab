from __future__ import annotations

from rest_framework import serializers

from stores.models import Document, DocumentStatus, RagStore, RerankBackend, SearchBackend, SearchMode
from stores.selectors import DOCUMENT_LIST_FIELDS
from stores.services import STORE_DEFAULTS, store_limits

# For these settings 0 means "the default", as in the original product.
ZERO_MEANS_DEFAULT = ("chunk_size", "top_k", "rerank_candidates")


class FusionWeights(serializers.Serializer):
    vector = serializers.FloatField(min_value=0, max_value=100)
    lexical = serializers.FloatField(min_value=0, max_value=100)


class StoreSettingsInput(serializers.Serializer):
    """Every setting of a store; on create and PUT an omitted one takes its default."""

    embedding_connection_id = serializers.IntegerField()
    chunk_size = serializers.IntegerField(min_value=0, max_value=20000)
    chunk_overlap = serializers.IntegerField(min_value=0, max_value=19999)
    chunking_strategy = serializers.CharField(max_length=32)
    contextual_chunks = serializers.BooleanField()
    top_k = serializers.IntegerField(min_value=0, max_value=50)
    search_mode = serializers.ChoiceField(choices=SearchMode.choices)
    search_backend = serializers.ChoiceField(choices=SearchBackend.choices)
    fts_config = serializers.CharField(max_length=63)
    fusion_weights = FusionWeights()
    typo_tolerance = serializers.BooleanField()
    rerank = serializers.BooleanField()
    rerank_backend = serializers.ChoiceField(choices=RerankBackend.choices)
    rerank_connection_id = serializers.IntegerField(allow_null=True)
    rerank_candidates = serializers.IntegerField(min_value=0, max_value=100)
    max_distance = serializers.FloatField(min_value=0, max_value=2)
    max_documents = serializers.IntegerField(min_value=0)
    max_bytes = serializers.IntegerField(min_value=0)

    def validate_chunk_size(self, value: int) -> int:
        if value and value < 200:
            raise serializers.ValidationError("chunk_size must be between 200 and 20000 characters")
        return value

    def validate(self, attrs: dict) -> dict:
        for name in ZERO_MEANS_DEFAULT:
            if attrs.get(name) == 0:
                attrs[name] = STORE_DEFAULTS[name]
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
    document_count = serializers.IntegerField(read_only=True)
    chunk_count = serializers.IntegerField(read_only=True)
    bytes_used = serializers.IntegerField(read_only=True)
    limits = serializers.SerializerMethodField()

    class Meta:
        model = RagStore
        fields = [
            "id",
            "name",
            "embedding_connection_id",
            "dimensions",
            *[f for f in STORE_DEFAULTS if f != "rerank_connection_id"],
            "rerank_connection_id",
            "document_count",
            "chunk_count",
            "bytes_used",
            "limits",
            "created_at",
            "updated_at",
        ]

    def get_limits(self, store: RagStore) -> dict:
        limits = store_limits(store)
        return {"max_documents": limits.documents, "max_bytes": limits.bytes}


class DocumentOutput(serializers.ModelSerializer):
    rag_store_id = serializers.IntegerField(source="store_id")

    class Meta:
        model = Document
        # Exactly what the list selector loads (the original bytes are never read for output).
        fields = ["rag_store_id" if name == "store_id" else name for name in DOCUMENT_LIST_FIELDS]


class DocumentListQuery(serializers.Serializer):
    status = serializers.ChoiceField(choices=DocumentStatus.choices, required=False)
    page = serializers.IntegerField(min_value=1, default=1)
    page_size = serializers.IntegerField(min_value=1, max_value=200, default=50)


class TextDocumentInput(serializers.Serializer):
    title = serializers.CharField(max_length=500)
    content = serializers.CharField(trim_whitespace=False, allow_blank=True)
    source = serializers.CharField(max_length=2048, required=False, allow_blank=True, default="")
    tags = serializers.ListField(
        child=serializers.CharField(max_length=128), max_length=64, required=False, default=list
    )


class BackendStatusOutput(serializers.Serializer):
    id = serializers.CharField()
    available = serializers.BooleanField()
    reason = serializers.CharField(allow_blank=True)
