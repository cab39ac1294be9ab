"""Services that write evaluation runs: starting them, and the one function that evaluates a run
(`evaluation_run_execute`), called by the Celery task and by `ragmux eval` alike; and saving a
finished run's configuration as its store's settings.

A run's row is its queue entry, in the leased queue ingestion runs on too
(ragmux.core.work_queue): a claim gives the worker a fencing token (``claim_token``) and a lease,
renewed at every question; the worker writes only while the row still carries its token, so a
run deleted (with its set or store) or taken back by the scheduler's sweep ends without writing
anything more.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput, LimitReached, ServiceError
from ragmux.core.wakeups import send_on_commit
from ragmux.core.work_queue import LeasedQueue
from retrieval import tasks
from retrieval.evaluation import scores
from retrieval.evaluation.ranking import RankedSearch, pool_options, rank_documents
from retrieval.models import (
    EvaluationQuestion,
    EvaluationRun,
    EvaluationSet,
    Judgement,
    QuestionEmbedding,
    RunQuestion,
    RunStatus,
)
from retrieval.search import embed_query, rerank_target
from stores.models import STORE_SETTINGS, Document, RagStore
from stores.services import StoreUpdate, store_update

logger = logging.getLogger("ragmux.retrieval.evaluation")

# How many configurations one comparison starts at once.
MAX_RUNS_PER_START = 10
# The store setting a search override sets, where the two names differ.
OVERRIDE_SETTING_NAMES = {"mode": "search_mode", "backend": "search_backend"}

RUNS = LeasedQueue(
    table=EvaluationRun._meta.db_table,
    owner_column="claimed_by",
    token_column="claim_token",
    queued=RunStatus.QUEUED,
    running=RunStatus.RUNNING,
    failed=RunStatus.FAILED,
    lease_setting="EVALUATION_RUN_LEASE",
    max_attempts_setting="EVALUATION_MAX_ATTEMPTS",
    worker_doing="running",
)

_audit_run = partial(audit_change, object_type="evaluation_run")


def _judged_questions(evaluation_set: EvaluationSet) -> list[tuple[EvaluationQuestion, dict[int, int]]]:
    """The set's questions that have a judged document, in order, each with {document id: grade}."""
    grades: dict[int, dict[int, int]] = defaultdict(dict)
    rows = Judgement.objects.filter(question__evaluation_set=evaluation_set).values_list(
        "question_id", "document_id", "grade"
    )
    for question_id, document_id, grade in rows:
        grades[question_id][document_id] = grade
    return [(question, grades[question.pk]) for question in evaluation_set.questions.all() if question.pk in grades]


def evaluation_runs_start(
    *,
    evaluation_set: EvaluationSet,
    configs: Sequence[Mapping[str, Any]],
    actor: AbstractBaseUser | None = None,
    enqueue: bool = True,
) -> list[EvaluationRun]:
    """One queued run per configuration ({label, overrides}: the search overrides, validated by
    `retrieval.serializers.SearchOverrides`), sent to the evaluation queue once committed;
    ``enqueue=False`` leaves them for the caller to claim and execute (`ragmux eval`)."""
    if not configs:
        raise InvalidInput("give at least one configuration", field="configs")
    if len(configs) > MAX_RUNS_PER_START:
        raise LimitReached(f"at most {MAX_RUNS_PER_START} configurations are evaluated at once")
    judged = len(_judged_questions(evaluation_set))
    if not judged:
        raise Conflict(
            "the set has no question with a judged document: mark the documents that answer a question first",
            code="nothing_to_evaluate",
        )
    runs = []
    with transaction.atomic():
        for config in configs:
            run = EvaluationRun.objects.create(
                evaluation_set=evaluation_set,
                label=config["label"],
                config=dict(config.get("overrides") or {}),
                questions_total=judged,
                created_by=actor,
            )
            _audit_run(
                run,
                actor=actor,
                action="evaluation_run.start",
                after=snapshot(run, ("evaluation_set_id", "label", "config")),
            )
            if enqueue:
                send_on_commit(tasks.evaluation_run, run.pk)
            runs.append(run)
    return runs


@transaction.atomic
def evaluation_run_delete(*, run: EvaluationRun, actor: AbstractBaseUser | None = None) -> None:
    """Deletes a run with what it found; one in progress stops at its next question."""
    before = snapshot(run, ("evaluation_set_id", "label", "status", "config"))
    EvaluationRun.objects.filter(pk=run.pk).delete()
    _audit_run(run, actor=actor, action="evaluation_run.delete", before=before)


def evaluation_run_claim(*, run_id: int, owner: str) -> EvaluationRun | None:
    """Claims a queued run for ``owner``; None when it is not queued (done, taken, deleted)."""
    claimed = RUNS.claim([run_id], owner=owner, also=", started_at = now()")
    if not claimed:
        return None
    return (
        EvaluationRun.objects.select_related("evaluation_set__store__embedding_connection")
        .filter(pk=run_id, **RUNS.held_filter(claimed[0][1]))
        .first()
    )


def _held(run: EvaluationRun) -> QuerySet[EvaluationRun]:
    """The run's row, while ``run``'s claim on it holds."""
    return EvaluationRun.objects.filter(pk=run.pk, **RUNS.held_filter(run.claim_token))


def _end(run: EvaluationRun, **fields: Any) -> bool:
    ended = _held(run).update(**fields, finished_at=timezone.now(), updated_at=timezone.now(), **RUNS.ended())
    return bool(ended)


def _fail(run: EvaluationRun, reason: str) -> None:
    if _end(run, status=RunStatus.FAILED, error=reason):
        logger.warning("evaluation run %s (%s) failed: %s", run.pk, run.label, reason)


def embedding_model_key(store: RagStore) -> str:
    """What makes a question's vector reusable: the provider, endpoint, model and width."""
    embedding = store.embedding_connection
    return "|".join(
        (embedding.provider_type, embedding.base_url, embedding.model_name, str(embedding.dimensions or ""))
    )


class _QuestionVectors:
    """The questions' vectors under the store's model: cached ones read once, the others
    embedded when first needed and cached for every later run."""

    def __init__(self, store: RagStore, question_ids: list[int]):
        self.store = store
        self.model_key = embedding_model_key(store)
        cached = QuestionEmbedding.objects.filter(question_id__in=question_ids, model_key=self.model_key)
        self.vectors = dict(cached.values_list("question_id", "vector"))

    def of(self, question: EvaluationQuestion) -> list[float]:
        if question.pk not in self.vectors:
            vector = embed_query(self.store, question.text).vectors[0]
            try:
                QuestionEmbedding.objects.bulk_create(
                    [QuestionEmbedding(question=question, model_key=self.model_key, vector=vector)],
                    ignore_conflicts=True,
                )
            except IntegrityError:
                pass  # the question was deleted meanwhile; its run skips it
            self.vectors[question.pk] = vector
        return self.vectors[question.pk]


def _returned(ranked: RankedSearch, grades: dict[int, int]) -> list[dict[str, Any]]:
    top = ranked.documents[: scores.NDCG_DEPTH]
    filenames = dict(Document.objects.filter(pk__in=top).values_list("pk", "filename"))
    return [
        {
            "document_id": document_id,
            "filename": filenames.get(document_id, ""),
            "rank": rank,
            "grade": grades.get(document_id, 0),
        }
        for rank, document_id in enumerate(top, 1)
    ]


def _record(run: EvaluationRun, question: EvaluationQuestion, score: scores.QuestionScore, returned: list) -> bool:
    """Writes a question's outcome and renews the lease; False when the claim is gone."""
    try:
        with transaction.atomic():
            renewed = RUNS.renew(
                [(run.pk, run.claim_token)], also=", questions_done = q.questions_done + 1, updated_at = now()"
            )
            if not renewed:
                return False
            RunQuestion.objects.create(
                run=run,
                question=question,
                ndcg=score.ndcg,
                recall=score.recall,
                reciprocal_rank=score.reciprocal_rank,
                hit=score.hit,
                latency_ms=score.latency_ms,
                returned=returned,
                found=[list(pair) for pair in score.found],
            )
    except IntegrityError:
        pass  # the question was deleted meanwhile: nothing to record of it
    return True


def question_score(row: RunQuestion) -> scores.QuestionScore:
    """A stored outcome as the engine's score."""
    return scores.QuestionScore(
        ndcg=row.ndcg,
        recall=row.recall,
        reciprocal_rank=row.reciprocal_rank,
        hit=row.hit,
        latency_ms=row.latency_ms,
        found=tuple(tuple(pair) for pair in row.found),
    )


def _release(run: EvaluationRun) -> None:
    """Gives a held run back to the queue as if it had not been claimed (a worker stopping is no
    failed attempt), and sends it again for the next worker; its questions done are kept."""
    with transaction.atomic():
        released = RUNS.release([(run.pk, run.claim_token)])
        if released:
            send_on_commit(tasks.evaluation_run, run.pk)
    if released:
        logger.info("worker stopping: evaluation run %s (%s) put back in the queue", run.pk, run.label)


def evaluation_run_execute(*, run: EvaluationRun, stop_requested: Callable[[], bool] = lambda: False) -> None:
    """Evaluates a claimed run (`evaluation_run_claim`): every judged question of its set searched
    with its configuration, scored and written as it goes (a run taken up again after its worker
    stopped resumes after the questions already written), then summarised. A search that fails
    fails the run with the question and the reason; so does running past
    EVALUATION_RUN_TIME_LIMIT. A run deleted meanwhile (with its set or store) just stops; one
    whose worker is asked to stop (``stop_requested``) goes back to the queue."""
    started = time.monotonic()
    store = run.evaluation_set.store
    questions = _judged_questions(run.evaluation_set)
    judged = {question.pk for question, _ in questions}
    done = judged & set(RunQuestion.objects.filter(run=run).values_list("question_id", flat=True))
    if not _held(run).update(questions_total=len(questions), questions_done=len(done)):
        return
    options = pool_options(store, run.config)
    wants_vector = options.embeds_query(store)
    vectors = _QuestionVectors(store, list(judged))
    limit = settings.EVALUATION_RUN_TIME_LIMIT
    for number, (question, grades) in enumerate(questions, 1):
        if question.pk in done:
            continue
        if stop_requested():
            _release(run)
            return
        if time.monotonic() - started > limit:
            _fail(
                run,
                f"the run took longer than EVALUATION_RUN_TIME_LIMIT ({limit:g}s) and was stopped "
                f"after {number - 1} of {len(questions)} questions",
            )
            return
        try:
            ranked = rank_documents(
                store=store,
                query=question.text,
                options=options,
                query_vector=vectors.of(question) if wants_vector else None,
            )
        except ServiceError as exc:
            _fail(run, f"question {number} of {len(questions)} ({question.text[:80]!r}): {exc.message}")
            return
        score = scores.score_question(ranked.documents, grades, ranked.latency_ms)
        if not _record(run, question, score, _returned(ranked, grades)):
            return
    question_scores = [question_score(row) for row in RunQuestion.objects.filter(run=run)]
    if not question_scores:
        _fail(run, "no question of the set could be evaluated (they were deleted while the run went on)")
        return
    _end(run, status=RunStatus.DONE, error="", summary=scores.summarise(question_scores).as_dict())


def evaluation_runs_requeue_expired() -> list[int]:
    """Puts back in the queue the runs whose lease ran out (their worker stopped), or fails those
    claimed EVALUATION_MAX_ATTEMPTS times; returns the ids of the runs to send again: those put
    back, and those queued for a lease's time without being claimed (their message was lost),
    whose wait starts over."""
    swept = RUNS.requeue_expired(also=", finished_at = CASE WHEN attempts >= %(max)s THEN now() ELSE finished_at END")
    requeued = [run_id for run_id, status in swept if status == RunStatus.QUEUED]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE evaluation_runs SET updated_at = now() WHERE status = %s AND updated_at < now() - %s RETURNING id",
            [RunStatus.QUEUED, RUNS.lease()],
        )
        waiting = [row[0] for row in cursor.fetchall()]
    return sorted({*requeued, *waiting})


# --------------------------------------------------------------------------------------------
# Applying a run's configuration to its store
# --------------------------------------------------------------------------------------------


def store_settings_of(store: RagStore, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The store settings a run's search overrides amount to (a rerank connection or route set by
    the run replaces the store's choice of either, as in a search)."""
    values = {
        OVERRIDE_SETTING_NAMES.get(name, name): value
        for name, value in overrides.items()
        if value is not None and OVERRIDE_SETTING_NAMES.get(name, name) in STORE_SETTINGS
    }
    return {**values, **rerank_target(store, dict(overrides))}


def evaluation_run_apply(*, run: EvaluationRun, actor: AbstractBaseUser | None = None) -> StoreUpdate:
    """Saves a finished run's configuration as its store's search settings."""
    if run.status != RunStatus.DONE:
        raise Conflict(
            f"run {run.label!r} is {run.status}: only a finished run's configuration can be saved",
            code="run_not_done",
        )
    store = RagStore.objects.get(pk=run.evaluation_set.store_id)
    with transaction.atomic():
        outcome = store_update(store=store, name=store.name, values=store_settings_of(store, run.config), actor=actor)
        _audit_run(run, actor=actor, action="evaluation_run.apply", after={"store_id": store.pk, "config": run.config})
    return outcome
