"""The requests of `/v1/files` and `/v1/vector_stores` in OpenAI's shapes. Fields we do not read
are ignored, as OpenAI's newer SDKs may send more; what we read is checked strictly."""

from __future__ import annotations

from rest_framework import serializers

from gateway.clients.models import FilePurpose
from gateway.clients.vector_store_selectors import PageRequest
from gateway.clients.vector_store_shapes import FILE_STATUSES
from ragmux.core.serializers import TypedInput
from retrieval.serializers import MAX_QUERY_CHARS, FiltersField
from stores.attributes import (
    MAX_ATTRIBUTE_STRING_CHARS,
    MAX_ATTRIBUTES,
    InvalidAttributes,
    check_key,
)
from stores.serializers import AttributesField

MAX_FILES_LISTED = 10_000
MAX_LISTED = 100
# The most files one call attaches (OpenAI's limit for a batch).
MAX_FILES_PER_CALL = 500
MAX_SEARCH_RESULTS = 50
MAX_QUERIES = 10
MAX_NAME_CHARS = 256
ID_MAX_CHARS = 64
# OpenAI's bounds of a static chunking strategy (tokens).
MIN_CHUNK_TOKENS, MAX_CHUNK_TOKENS = 100, 4096
MAX_EXPIRY_DAYS = 365


class MetadataField(serializers.Field):
    """OpenAI's `metadata`: at most 16 string values, keys of at most 64 characters."""

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("metadata must be a JSON object")
        if len(data) > MAX_ATTRIBUTES:
            raise serializers.ValidationError(f"metadata holds at most {MAX_ATTRIBUTES} keys")
        for key, value in data.items():
            try:
                check_key(key, what="a metadata key")
            except InvalidAttributes as exc:
                raise serializers.ValidationError(str(exc)) from None
            if not isinstance(value, str) or len(value) > MAX_ATTRIBUTE_STRING_CHARS or "\x00" in value:
                raise serializers.ValidationError(
                    f'metadata "{key}" must be a string of at most {MAX_ATTRIBUTE_STRING_CHARS} characters, without NUL'
                )
        return data

    def to_representation(self, value):
        return value


class ExpiresAfterInput(TypedInput):
    anchor = serializers.ChoiceField(choices=["last_active_at"])
    days = serializers.IntegerField(min_value=1, max_value=MAX_EXPIRY_DAYS)


class StaticChunkingInput(TypedInput):
    max_chunk_size_tokens = serializers.IntegerField(min_value=MIN_CHUNK_TOKENS, max_value=MAX_CHUNK_TOKENS)
    chunk_overlap_tokens = serializers.IntegerField(min_value=0, max_value=MAX_CHUNK_TOKENS)

    def validate(self, data):
        if data["chunk_overlap_tokens"] > data["max_chunk_size_tokens"] // 2:
            raise serializers.ValidationError("chunk_overlap_tokens must not exceed half of max_chunk_size_tokens")
        return data


class ChunkingStrategyInput(TypedInput):
    type = serializers.ChoiceField(choices=["auto", "static"])
    static = StaticChunkingInput(required=False)

    def validate(self, data):
        if data["type"] == "static" and "static" not in data:
            raise serializers.ValidationError({"static": "required with type static"})
        return data


class PageQuery(TypedInput):
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LISTED, default=20)
    order = serializers.ChoiceField(choices=["asc", "desc"], default="desc")
    after = serializers.CharField(max_length=ID_MAX_CHARS, required=False)
    before = serializers.CharField(required=False)

    def validate_before(self, value):
        raise serializers.ValidationError("paging backwards is not supported: page with after")

    def page(self) -> PageRequest:
        data = self.validated_data
        return PageRequest(limit=data["limit"], newest_first=data["order"] == "desc", after=data.get("after"))


class FileListQuery(PageQuery):
    limit = serializers.IntegerField(min_value=1, max_value=MAX_FILES_LISTED, default=MAX_FILES_LISTED)
    purpose = serializers.ChoiceField(choices=FilePurpose.choices, required=False)


class VectorStoreFileListQuery(PageQuery):
    filter = serializers.ChoiceField(choices=FILE_STATUSES, required=False)


class FileUploadInput(TypedInput):
    purpose = serializers.ChoiceField(choices=FilePurpose.choices)


def _file_ids(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=ID_MAX_CHARS), max_length=MAX_FILES_PER_CALL, **kwargs
    )


class VectorStoreCreateInput(TypedInput):
    name = serializers.CharField(max_length=MAX_NAME_CHARS, required=False, allow_blank=True, default="")
    file_ids = _file_ids(required=False, default=list)
    metadata = MetadataField(required=False, allow_null=True, default=None)
    expires_after = ExpiresAfterInput(required=False, allow_null=True, default=None)
    chunking_strategy = ChunkingStrategyInput(required=False, allow_null=True, default=None)


class VectorStoreUpdateInput(TypedInput):
    name = serializers.CharField(max_length=MAX_NAME_CHARS, required=False, allow_blank=True, allow_null=True)
    metadata = MetadataField(required=False, allow_null=True)
    expires_after = ExpiresAfterInput(required=False, allow_null=True)


class VectorStoreFileInput(TypedInput):
    """A file to attach. Its `chunking_strategy` is accepted and not applied: a file is chunked
    by its store's settings (chosen when the vector store was created)."""

    file_id = serializers.CharField(max_length=ID_MAX_CHARS)
    attributes = AttributesField(required=False, allow_null=True, default=None)
    chunking_strategy = ChunkingStrategyInput(required=False, allow_null=True, default=None)


class VectorStoreFileUpdateInput(TypedInput):
    attributes = AttributesField(allow_null=True)


class FileBatchInput(TypedInput):
    """`file_ids` (each with the batch's `attributes`), or `files` (each with its own)."""

    file_ids = _file_ids(required=False)
    files = serializers.ListField(child=VectorStoreFileInput(), max_length=MAX_FILES_PER_CALL, required=False)
    attributes = AttributesField(required=False, allow_null=True, default=None)
    chunking_strategy = ChunkingStrategyInput(required=False, allow_null=True, default=None)

    def validate(self, data):
        if ("file_ids" in data) == ("files" in data):
            raise serializers.ValidationError({"file_ids": "give file_ids or files, one of the two"})
        if not (data.get("file_ids") or data.get("files")):
            raise serializers.ValidationError({"file_ids": "at least one file is required"})
        return data

    def attachments(self) -> list[tuple[str, dict]]:
        """(file id, attributes) of each file, in order."""
        data = self.validated_data
        if "files" in data:
            return [(item["file_id"], item["attributes"] or {}) for item in data["files"]]
        return [(file_id, data["attributes"] or {}) for file_id in data["file_ids"]]


class QueryField(serializers.Field):
    """`query`: a string, or a list of strings searched as one query (joined by spaces)."""

    def to_internal_value(self, data):
        queries = [data] if isinstance(data, str) else data
        if not isinstance(queries, list) or not queries or len(queries) > MAX_QUERIES:
            raise serializers.ValidationError(f"query must be a string or a list of 1 to {MAX_QUERIES} strings")
        for query in queries:
            if not isinstance(query, str) or not query.strip():
                raise serializers.ValidationError("each query must be a non-empty string")
            if "\x00" in query:
                raise serializers.ValidationError("a query must not contain NUL characters")
        joined = " ".join(query.strip() for query in queries)
        if len(joined) > MAX_QUERY_CHARS:
            raise serializers.ValidationError(f"the query is longer than {MAX_QUERY_CHARS} characters")
        return queries

    def to_representation(self, value):
        return value


class RankingOptionsInput(TypedInput):
    """Accepted and not applied: results are ranked by the store's own settings (fusion, rerank)."""

    ranker = serializers.CharField(max_length=64, required=False)
    score_threshold = serializers.FloatField(min_value=0, max_value=1, required=False)


class VectorStoreSearchInput(TypedInput):
    query = QueryField()
    filters = FiltersField(required=False, allow_null=True, default=None)
    max_num_results = serializers.IntegerField(min_value=1, max_value=MAX_SEARCH_RESULTS, default=10)
    ranking_options = RankingOptionsInput(required=False, allow_null=True)
    # Accepted and not applied: the query is searched as written.
    rewrite_query = serializers.BooleanField(required=False, default=False)
