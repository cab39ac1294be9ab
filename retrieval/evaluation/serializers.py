from __future__ import annotations

from rest_framework import serializers

from ragmux.core.serializers import MAX_BIGINT, StrictInput
from retrieval.evaluation.run_services import MAX_RUNS_PER_START
from retrieval.evaluation.services import MAX_QUESTIONS_PER_SET
from retrieval.models import MAX_GRADE, MAX_NAME_CHARS
from retrieval.serializers import MAX_QUERY_CHARS, SearchOverrides

# The most documents one question may judge.
MAX_JUDGEMENTS_PER_QUESTION = 1000


class JudgementInput(StrictInput):
    document_id = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)
    grade = serializers.IntegerField(min_value=1, max_value=MAX_GRADE, default=1)


def _judgements(**kwargs) -> serializers.ListSerializer:
    return JudgementInput(many=True, max_length=MAX_JUDGEMENTS_PER_QUESTION, **kwargs)


class QuestionInput(StrictInput):
    text = serializers.CharField(max_length=MAX_QUERY_CHARS)
    judgements = _judgements(required=False)


class QuestionUpdateInput(StrictInput):
    """Either or both: the new text, the judgements that replace the question's."""

    text = serializers.CharField(max_length=MAX_QUERY_CHARS, required=False)
    judgements = _judgements(required=False)


class SetCreateInput(StrictInput):
    name = serializers.CharField(max_length=MAX_NAME_CHARS)
    questions = QuestionInput(many=True, required=False, max_length=MAX_QUESTIONS_PER_SET)


class SetUpdateInput(StrictInput):
    name = serializers.CharField(max_length=MAX_NAME_CHARS)


class SetImportInput(StrictInput):
    """A BEIR collection's two files, uploaded as a form."""

    name = serializers.CharField(max_length=MAX_NAME_CHARS)
    queries = serializers.FileField()
    qrels = serializers.FileField()


class RunConfigInput(StrictInput):
    label = serializers.CharField(max_length=MAX_NAME_CHARS)
    # Exactly what a search may override (the search endpoint's own fields, less the query).
    overrides = SearchOverrides(required=False)


class RunsStartInput(StrictInput):
    configs = RunConfigInput(many=True, min_length=1, max_length=MAX_RUNS_PER_START)


class CompareQuery(serializers.Serializer):
    a = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)
    b = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)


class JudgementOutput(serializers.Serializer):
    document_id = serializers.IntegerField()
    filename = serializers.CharField(source="document.filename")
    grade = serializers.IntegerField()


class QuestionOutput(serializers.Serializer):
    id = serializers.IntegerField()
    text = serializers.CharField()
    external_id = serializers.CharField()
    position = serializers.IntegerField()
    judgements = JudgementOutput(many=True)


class SetOutput(serializers.Serializer):
    id = serializers.IntegerField()
    rag_store_id = serializers.IntegerField(source="store_id")
    name = serializers.CharField()
    question_count = serializers.IntegerField()
    run_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class RunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    evaluation_set_id = serializers.IntegerField()
    label = serializers.CharField()
    config = serializers.JSONField()
    status = serializers.CharField()
    questions_total = serializers.IntegerField()
    questions_done = serializers.IntegerField()
    error = serializers.CharField()
    summary = serializers.JSONField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()


class RunQuestionOutput(serializers.Serializer):
    question_id = serializers.IntegerField()
    text = serializers.CharField(source="question.text")
    ndcg = serializers.FloatField()
    recall = serializers.FloatField()
    reciprocal_rank = serializers.FloatField()
    hit = serializers.FloatField()
    latency_ms = serializers.FloatField()
    returned = serializers.JSONField()
    found = serializers.JSONField()
