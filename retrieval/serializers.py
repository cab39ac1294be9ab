from __future__ import annotations

from rest_framework import serializers

from ragmux.core.serializers import StrictInput
from stores.models import SearchBackend, SearchMode
from stores.serializers import FusionWeights, refuse_rerank

API_MAX_TOP_K = 50
# The longest query a search (and a `/v1/rerank`) takes.
MAX_QUERY_CHARS = 4000


class SearchInput(StrictInput):
    """A search with per-call overrides; an omitted field uses the store's setting."""

    query = serializers.CharField(max_length=MAX_QUERY_CHARS, trim_whitespace=True)
    top_k = serializers.IntegerField(required=False, min_value=0)
    mode = serializers.ChoiceField(choices=SearchMode.choices, required=False)
    backend = serializers.ChoiceField(choices=SearchBackend.choices, required=False)
    max_distance = serializers.FloatField(required=False, min_value=0, max_value=2)
    fusion_weights = FusionWeights(required=False)
    typo_tolerance = serializers.BooleanField(required=False)
    rerank = serializers.BooleanField(required=False)

    validate_rerank = staticmethod(refuse_rerank)

    def validate_top_k(self, value: int) -> int | None:
        # 0 means the store's top_k; the API never returns more than 50 hits.
        return min(value, API_MAX_TOP_K) or None


class CorrectionOutput(serializers.Serializer):
    original = serializers.CharField()
    corrected = serializers.CharField()
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

    def to_representation(self, hit):
        body = super().to_representation(hit)
        # Only real BM25 scores are exposed; ts_rank_cd is not comparable and stays hidden.
        if hit.lex_score is not None:
            body["lex_score"] = hit.lex_score
        return body
