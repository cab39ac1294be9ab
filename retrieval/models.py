"""Evaluation of a store's search (retrieval.evaluation): sets of questions with the documents
that answer them, runs of a search configuration over a set, and each question's outcome."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from retrieval.serializers import MAX_QUERY_CHARS
from stores.models import Document, RagStore

# The longest name of a set and label of a run.
MAX_NAME_CHARS = 100
# The highest grade of a judgement (1 is "relevant"; BEIR's graded sets use up to 3 or 4).
MAX_GRADE = 10


class EvaluationSet(models.Model):
    store = models.ForeignKey(RagStore, on_delete=models.CASCADE, related_name="evaluation_sets")
    name = models.CharField(max_length=MAX_NAME_CHARS)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "evaluation_sets"
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["store", "name"], name="evaluation_sets_unique_name")]

    def __str__(self) -> str:
        return self.name


class EvaluationQuestion(models.Model):
    evaluation_set = models.ForeignKey(EvaluationSet, on_delete=models.CASCADE, related_name="questions")
    text = models.CharField(max_length=MAX_QUERY_CHARS)
    # The BEIR query id of an imported question.
    external_id = models.CharField(max_length=255, blank=True, default="")
    position = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "evaluation_questions"
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.text


class Judgement(models.Model):
    """A document that answers a question, graded. Judged at document level, so reprocessing
    the document (new chunks) keeps it."""

    question = models.ForeignKey(EvaluationQuestion, on_delete=models.CASCADE, related_name="judgements")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="+")
    grade = models.PositiveSmallIntegerField(default=1)

    class Meta:
        db_table = "evaluation_judgements"
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["question", "document"], name="evaluation_judgements_unique"),
            models.CheckConstraint(
                condition=models.Q(grade__gte=1, grade__lte=MAX_GRADE), name="evaluation_judgements_grade"
            ),
        ]


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class EvaluationRun(models.Model):
    """One search configuration evaluated over a set. The row is its own queue entry: a worker
    claims it (a lease and a fencing token, as ingestion claims documents) and writes progress
    only while it still holds the claim."""

    evaluation_set = models.ForeignKey(EvaluationSet, on_delete=models.CASCADE, related_name="runs")
    label = models.CharField(max_length=MAX_NAME_CHARS)
    # The search overrides (retrieval.serializers.SearchOverrides' validated data).
    config = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    questions_total = models.PositiveIntegerField(default=0)
    questions_done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    # retrieval.evaluation.scores.Summary.as_dict() once done.
    summary = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    claim_token = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "evaluation_runs"
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "lease_expires_at"], name="evaluation_runs_leases")]

    def __str__(self) -> str:
        return self.label


class RunQuestion(models.Model):
    """What one run made of one question: its scores, its top documents and where the judged
    documents came back."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="questions")
    question = models.ForeignKey(EvaluationQuestion, on_delete=models.CASCADE, related_name="+")
    ndcg = models.FloatField()
    recall = models.FloatField()
    reciprocal_rank = models.FloatField()
    hit = models.FloatField()
    latency_ms = models.FloatField()
    # The first documents returned: [{document_id, filename, rank, grade}] (grade 0: not judged).
    returned = models.JSONField(default=list)
    # Each judged document that came back: [[document_id, rank]].
    found = models.JSONField(default=list)

    class Meta:
        db_table = "evaluation_run_questions"
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["run", "question"], name="evaluation_run_questions_unique")]


class QuestionEmbedding(models.Model):
    """A question's vector under one embedding model, so each question is embedded (and billed)
    once per model, whatever the number of runs."""

    question = models.ForeignKey(EvaluationQuestion, on_delete=models.CASCADE, related_name="+")
    # What makes a vector reusable: retrieval.evaluation.run_services.embedding_model_key.
    model_key = models.CharField(max_length=2400)
    vector = ArrayField(models.FloatField())

    class Meta:
        db_table = "evaluation_question_embeddings"
        constraints = [
            models.UniqueConstraint(fields=["question", "model_key"], name="evaluation_question_embeddings_unique")
        ]
