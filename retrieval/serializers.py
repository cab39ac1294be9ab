from __future__ import annotations

from rest_framework import serializers

from ragmux.core.serializers import StrictInput
from retrieval.filters import InvalidFilter, as_json, parse_filter
from retrieval.search import SearchResult
from stores.models import RerankBackend, SearchBackend, SearchMode
from stores.serializers import MAX_TOP_K, FusionWeights, fusion_field

# The refusal of a search naming both a rerank connection and a rerank route.
RERANK_TARGET_BOTH = "rerank_target_both"
# The longest query a search (and a `/v1/rerank`) takes.
MAX_QUERY_CHARS = 4000


class SearchOverrides(StrictInput):
    """What one search may override of its store's settings; an omitted field uses the store's
    setting. The search endpoint and an evaluation run's configuration share this definition."""

    top_k = serializers.IntegerField(required=False, min_value=0)
    mode = serializers.ChoiceField(choices=SearchMode.choices, required=False)
    backend = serializers.ChoiceField(choices=SearchBackend.choices, required=False)
    max_distance = serializers.FloatField(required=False, min_value=0, max_value=2)
    fusion_weights = FusionWeights(required=False)
    fusion = fusion_field(required=False)
    typo_tolerance = serializers.BooleanField(required=False)
    rerank = serializers.BooleanField(required=False)
    rerank_backend = serializers.ChoiceField(choices=RerankBackend.choices, required=False)
    rerank_connection_id = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
    rerank_route_id = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)

    def validate_top_k(self, value: int) -> int | None:
        # 0 means the store's top_k; the API never returns more than MAX_TOP_K hits.
        return min(value, MAX_TOP_K) or None

    def validate(self, attrs: dict) -> dict:
        if "rerank_connection_id" in attrs and "rerank_route_id" in attrs:
            raise serializers.ValidationError(
                {"rerank_route_id": "set rerank_connection_id or rerank_route_id, not both"}, code=RERANK_TARGET_BOTH
            )
        return attrs


class FiltersField(serializers.Field):
    """A search filter in OpenAI's `file_search` shape (retrieval/filters.py), parsed strictly."""

    def to_internal_value(self, data):
        try:
            return parse_filter(data)
        except InvalidFilter as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return as_json(value)


class SearchInput(SearchOverrides):
    """A search with per-call overrides."""

    query = serializers.CharField(max_length=MAX_QUERY_CHARS, trim_whitespace=True)
    filters = FiltersField(required=False)


class CorrectionOutput(serializers.Serializer):
    original = serializers.CharField()
    corrected = serializers.CharField()
    corrected_word = serializers.CharField()
    distance = serializers.IntegerField()


class HitOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    filename = serializers.CharField()
    index = serializers.IntegerField()
    section = serializers.CharField(allow_blank=True)
    page = serializers.IntegerField(allow_null=True)
    content = serializers.CharField()
    distance = serializers.FloatField(allow_null=True)
    score = serializers.FloatField()
    vector_rank = serializers.IntegerField()
    fts_rank = serializers.IntegerField()
    source = serializers.CharField(allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField())
    attributes = serializers.DictField()
    matched_terms = serializers.ListField(child=serializers.CharField())

    def to_representation(self, hit):
        body = super().to_representation(hit)
        # Only real BM25 scores are exposed; ts_rank_cd is not comparable and stays hidden.
        if hit.lex_score is not None:
            body["lex_score"] = hit.lex_score
        if hit.rerank_score is not None:
            body["rerank_score"] = hit.rerank_score
        return body


def rerank_fields(result: SearchResult) -> dict:
    """The rerank fields of a search response: `rerank_latency_ms` is null only when reranking is
    off; `rerank_skipped` says that nothing could rerank (not a failure)."""
    report = result.rerank
    return {
        "reranked": bool(report and report.reranked),
        "rerank_backend": result.options.rerank_backend,
        "rerank_fallback": bool(report and report.fallback),
        "rerank_latency_ms": None if report is None else report.latency_ms,
        "rerank_skipped": bool(report and report.skipped),
        "rerank_skipped_reason": report.skipped_reason if report else "",
        "rerank_fallback_reason": report.fallback_reason if report else "",
    }
