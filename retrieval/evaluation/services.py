"""Services that write evaluation sets, their questions and judgements, and runs; and the one
function that evaluates a run (`evaluation_run_execute`), called by the Celery task and by
`ragmux eval` alike.

A run's row is its queue entry, claimed as ingestion claims documents: a conditional update
gives the worker a fencing token (``claim_token``) and a lease, renewed at every question; the
worker writes only while the row still carries its token, so a run deleted (with its set or
store) or taken back by the scheduler's sweep ends without writing anything more.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import PurePosixPath
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max, QuerySet
from django.utils import timezone

from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput, LimitReached, ServiceError
from ragmux.core.wakeups import send_on_commit
from retrieval import tasks
from retrieval.evaluation import beir, metrics
from retrieval.evaluation.ranking import RankedSearch, rank_documents
from retrieval.models import (
    MAX_GRADE,
    EvaluationQuestion,
    EvaluationRun,
    EvaluationSet,
    Judgement,
    QuestionEmbedding,
    RunQuestion,
    RunStatus,
)
from retrieval.search import SearchOptions, embed_query, rerank_target
from retrieval.serializers import MAX_QUERY_CHARS
from stores.models import STORE_SETTINGS, Document, RagStore
from stores.services import StoreUpdate, store_update

logger = logging.getLogger("ragmux.retrieval.evaluation")

# How many questions a set holds, and how many configurations one comparison starts at once.
MAX_QUESTIONS_PER_SET = 10_000
MAX_RUNS_PER_START = 10
# How many unmatched BEIR ids an import names (it counts them all).
UNMATCHED_SHOWN = 20
LEASE_EXPIRED = "the worker running it stopped before finishing (its lease expired)"
EXTERNAL_ID_CHARS = EvaluationQuestion._meta.get_field("external_id").max_length
# The store setting a search override sets, where the two names differ.
OVERRIDE_SETTING_NAMES = {"mode": "search_mode", "backend": "search_backend"}

_audit_set = partial(audit_change, object_type="evaluation_set")
_audit_run = partial(audit_change, object_type="evaluation_run")


# --------------------------------------------------------------------------------------------
# Sets, questions and judgements
# --------------------------------------------------------------------------------------------


def _set_snapshot(evaluation_set: EvaluationSet) -> dict[str, Any]:
    return {**snapshot(evaluation_set, ("store_id", "name")), "questions": evaluation_set.questions.count()}


def _question_snapshot(question: EvaluationQuestion) -> dict[str, Any]:
    grades = question.judgements.order_by("document_id").values_list("document_id", "grade")
    return {"question_id": question.pk, "text": question.text, "judgements": {str(d): g for d, g in grades}}


def _refuse_duplicate_name(store: RagStore, name: str, *, exclude: int | None = None) -> None:
    others = EvaluationSet.objects.filter(store=store, name=name).exclude(pk=exclude)
    if others.exists():
        raise Conflict(f"the store already has an evaluation set named {name!r}", code="duplicate_name")


def _grades(store: RagStore, judgements: Sequence[Mapping[str, int]]) -> dict[int, int]:
    """{document id: grade} of judgements given as [{document_id, grade}], each document one of
    the store's (the last grade given for a document counts)."""
    grades = {item["document_id"]: item.get("grade", 1) for item in judgements}
    known = set(Document.objects.filter(store=store, pk__in=list(grades)).values_list("pk", flat=True))
    unknown = sorted(set(grades) - known)
    if unknown:
        raise InvalidInput(f"document {unknown[0]} is not a document of the store {store.name!r}", field="judgements")
    return grades


def _refuse_too_many_questions(evaluation_set: EvaluationSet, adding: int) -> None:
    if evaluation_set.questions.count() + adding > MAX_QUESTIONS_PER_SET:
        raise LimitReached(f"an evaluation set holds at most {MAX_QUESTIONS_PER_SET} questions")


def _add_questions(evaluation_set: EvaluationSet, questions: Sequence[Mapping[str, Any]]) -> list[EvaluationQuestion]:
    """Adds questions ({text, judgements: [{document_id, grade}], external_id?}) after the set's
    last one."""
    _refuse_too_many_questions(evaluation_set, len(questions))
    grades = [_grades(evaluation_set.store, question.get("judgements", ())) for question in questions]
    last = evaluation_set.questions.aggregate(last=Max("position"))["last"]
    first = 0 if last is None else last + 1
    created = EvaluationQuestion.objects.bulk_create(
        EvaluationQuestion(
            evaluation_set=evaluation_set,
            text=question["text"],
            external_id=question.get("external_id", ""),
            position=first + offset,
        )
        for offset, question in enumerate(questions)
    )
    Judgement.objects.bulk_create(
        Judgement(question=question, document_id=document_id, grade=grade)
        for question, question_grades in zip(created, grades, strict=True)
        for document_id, grade in question_grades.items()
    )
    return created


def _create_set(*, store: RagStore, name: str, user: AbstractBaseUser | None) -> EvaluationSet:
    _refuse_duplicate_name(store, name)
    try:
        with transaction.atomic():
            return EvaluationSet.objects.create(store=store, name=name, created_by=user)
    except IntegrityError:
        raise Conflict(f"the store already has an evaluation set named {name!r}", code="duplicate_name") from None


def evaluation_set_create(
    *,
    store: RagStore,
    name: str,
    questions: Sequence[Mapping[str, Any]] = (),
    user: AbstractBaseUser | None = None,
) -> EvaluationSet:
    """A set of ``questions``: each {text, judgements: [{document_id, grade}]}."""
    with transaction.atomic():
        evaluation_set = _create_set(store=store, name=name, user=user)
        _add_questions(evaluation_set, questions)
        _audit_set(evaluation_set, actor=user, action="evaluation_set.create", after=_set_snapshot(evaluation_set))
    return evaluation_set


@dataclass(frozen=True)
class BeirImport:
    """An imported set and what of the files matched nothing: BEIR corpus ids that name no
    document of the store, and queries not imported: missing from queries.jsonl (``missing_``,
    counted among the unmatched too) or judging no document of the store."""

    evaluation_set: EvaluationSet
    questions: int
    judgements: int
    unmatched_documents: list[str]
    unmatched_documents_total: int
    unmatched_queries: list[str]
    unmatched_queries_total: int
    missing_queries: list[str]
    missing_queries_total: int


def _documents_by_beir_id(store: RagStore) -> dict[str, int]:
    """Each document of the store under the ids a BEIR corpus may name it by: its `source`, and
    its file name's stem (the source wins when a stem is also another document's source)."""
    by_id: dict[str, int] = {}
    rows = Document.objects.filter(store=store).order_by("id").values_list("pk", "source", "filename")
    for document_id, _, filename in rows:
        by_id.setdefault(PurePosixPath(filename).stem, document_id)
    for document_id, source, _ in rows:
        if source:
            by_id[source] = document_id
    return by_id


def uploaded_text(upload: IO[bytes], *, field: str) -> str:
    """An uploaded BEIR file's text (the API's and the dashboard's forms): UTF-8, a byte-order
    mark dropped, and no NUL character (which no text column holds)."""
    try:
        text = upload.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput(f"{field}: the file is not UTF-8 text", field=field) from None
    if "\x00" in text:
        raise InvalidInput(f"{field}: the file holds a NUL character", field=field)
    return text


def _parsed(parse, text: str):
    try:
        return parse(text)
    except beir.BeirFormatError as exc:
        raise InvalidInput(str(exc), code="invalid_beir") from None


def evaluation_set_import_beir(
    *, store: RagStore, name: str, queries_text: str, qrels_text: str, user: AbstractBaseUser | None = None
) -> BeirImport:
    """A set from a BEIR collection's `queries.jsonl` and `qrels/test.tsv`: one question per query
    the qrels judge, its judged corpus ids matched to the store's documents by `source` or file
    name stem (grades above 0). Refused when nothing matches."""
    queries = _parsed(beir.parse_queries, queries_text)
    qrels = _parsed(beir.parse_qrels, qrels_text)
    documents = _documents_by_beir_id(store)
    judged_ids = sorted({corpus_id for judged in qrels.values() for corpus_id, grade in judged.items() if grade > 0})
    unmatched_documents = [corpus_id for corpus_id in judged_ids if corpus_id not in documents]
    if judged_ids and len(unmatched_documents) == len(judged_ids):
        raise InvalidInput(
            f"none of the {len(judged_ids)} corpus ids judged in qrels/test.tsv names a document of the store "
            f"{store.name!r} by its source or file name stem (for example {judged_ids[0]!r})",
            code="nothing_matched",
        )
    questions, unmatched_queries = [], []
    missing_queries = [query_id for query_id in qrels if query_id not in queries]
    for query_id, judged in qrels.items():
        matched = [
            {"document_id": documents[corpus_id], "grade": grade}
            for corpus_id, grade in judged.items()
            if grade > 0 and corpus_id in documents
        ]
        if query_id not in queries or not matched:
            unmatched_queries.append(query_id)
            continue
        text = queries[query_id].strip()
        if "\x00" in text or "\x00" in query_id:
            raise InvalidInput(f"{beir.QUERIES_FILE}: query {query_id!r} holds a NUL character")
        if len(query_id) > EXTERNAL_ID_CHARS:
            raise InvalidInput(
                f"{beir.QUERIES_FILE}: query id {query_id[:40]!r}… is longer than {EXTERNAL_ID_CHARS} characters"
            )
        if len(text) > MAX_QUERY_CHARS:
            raise InvalidInput(
                f"{beir.QUERIES_FILE}: query {query_id!r} is {len(text)} characters long, "
                f"more than a question may be ({MAX_QUERY_CHARS})"
            )
        graded_too_high = [item for item in matched if item["grade"] > MAX_GRADE]
        if graded_too_high:
            raise InvalidInput(
                f"{beir.QRELS_FILE}: query {query_id!r} grades a document {graded_too_high[0]['grade']}, "
                f"above the highest grade ({MAX_GRADE})"
            )
        questions.append({"text": text, "external_id": query_id, "judgements": matched})
    if not questions:
        raise InvalidInput(
            "no query of qrels/test.tsv both appears in queries.jsonl and judges a document of the store",
            code="nothing_matched",
        )
    with transaction.atomic():
        evaluation_set = _create_set(store=store, name=name, user=user)
        _add_questions(evaluation_set, questions)
        _audit_set(evaluation_set, actor=user, action="evaluation_set.import", after=_set_snapshot(evaluation_set))
    return BeirImport(
        evaluation_set=evaluation_set,
        questions=len(questions),
        judgements=sum(len(question["judgements"]) for question in questions),
        unmatched_documents=unmatched_documents[:UNMATCHED_SHOWN],
        unmatched_documents_total=len(unmatched_documents),
        unmatched_queries=unmatched_queries[:UNMATCHED_SHOWN],
        unmatched_queries_total=len(unmatched_queries),
        missing_queries=missing_queries[:UNMATCHED_SHOWN],
        missing_queries_total=len(missing_queries),
    )


def evaluation_set_update(
    *, evaluation_set: EvaluationSet, name: str, user: AbstractBaseUser | None = None
) -> EvaluationSet:
    _refuse_duplicate_name(evaluation_set.store, name, exclude=evaluation_set.pk)
    with transaction.atomic():
        before = _set_snapshot(evaluation_set)
        evaluation_set.name = name
        try:
            with transaction.atomic():
                evaluation_set.save(update_fields=["name", "updated_at"])
        except IntegrityError:
            raise Conflict(f"the store already has an evaluation set named {name!r}", code="duplicate_name") from None
        _audit_set(
            evaluation_set,
            actor=user,
            action="evaluation_set.update",
            before=before,
            after=_set_snapshot(evaluation_set),
        )
    return evaluation_set


@transaction.atomic
def evaluation_set_delete(*, evaluation_set: EvaluationSet, user: AbstractBaseUser | None = None) -> None:
    """Deletes the set with its questions and runs; a run in progress stops at its next question."""
    before = _set_snapshot(evaluation_set)
    EvaluationSet.objects.filter(pk=evaluation_set.pk).delete()
    _audit_set(evaluation_set, actor=user, action="evaluation_set.delete", before=before)


@transaction.atomic
def evaluation_question_add(
    *,
    evaluation_set: EvaluationSet,
    text: str,
    judgements: Sequence[Mapping[str, int]] = (),
    user: AbstractBaseUser | None = None,
) -> EvaluationQuestion:
    (question,) = _add_questions(evaluation_set, [{"text": text, "judgements": judgements}])
    _audit_set(evaluation_set, actor=user, action="evaluation_set.question_add", after=_question_snapshot(question))
    return question


@transaction.atomic
def evaluation_question_update(
    *,
    question: EvaluationQuestion,
    text: str | None = None,
    judgements: Sequence[Mapping[str, int]] | None = None,
    user: AbstractBaseUser | None = None,
) -> EvaluationQuestion:
    """Changes a question's text, or replaces its judgements (whatever is given)."""
    evaluation_set = question.evaluation_set
    before = _question_snapshot(question)
    if text is not None:
        question.text = text
        question.save(update_fields=["text"])
    if judgements is not None:
        grades = _grades(evaluation_set.store, judgements)
        question.judgements.all().delete()
        Judgement.objects.bulk_create(
            Judgement(question=question, document_id=document_id, grade=grade) for document_id, grade in grades.items()
        )
    _audit_set(
        evaluation_set,
        actor=user,
        action="evaluation_set.question_update",
        before=before,
        after=_question_snapshot(question),
    )
    return question


@transaction.atomic
def evaluation_question_delete(*, question: EvaluationQuestion, user: AbstractBaseUser | None = None) -> None:
    before = _question_snapshot(question)
    EvaluationQuestion.objects.filter(pk=question.pk).delete()
    _audit_set(question.evaluation_set, actor=user, action="evaluation_set.question_delete", before=before)


# --------------------------------------------------------------------------------------------
# Runs: starting, claiming, executing
# --------------------------------------------------------------------------------------------


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
    user: AbstractBaseUser | None = None,
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
                created_by=user,
            )
            _audit_run(
                run,
                actor=user,
                action="evaluation_run.start",
                after=snapshot(run, ("evaluation_set_id", "label", "config")),
            )
            if enqueue:
                send_on_commit(tasks.evaluation_run, run.pk)
            runs.append(run)
    return runs


@transaction.atomic
def evaluation_run_delete(*, run: EvaluationRun, user: AbstractBaseUser | None = None) -> None:
    """Deletes a run with what it found; one in progress stops at its next question."""
    before = snapshot(run, ("evaluation_set_id", "label", "status", "config"))
    EvaluationRun.objects.filter(pk=run.pk).delete()
    _audit_run(run, actor=user, action="evaluation_run.delete", before=before)


def _lease() -> timedelta:
    return timedelta(seconds=settings.EVALUATION_RUN_LEASE)


def evaluation_run_claim(*, run_id: int, owner: str) -> EvaluationRun | None:
    """Claims a queued run for ``owner``; None when it is not queued (done, taken, deleted)."""
    now = timezone.now()
    claimed = EvaluationRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING,
        claimed_by=owner,
        claim_token=F("claim_token") + 1,
        lease_expires_at=now + _lease(),
        attempts=F("attempts") + 1,
        started_at=now,
        updated_at=now,
    )
    if not claimed:
        return None
    return (
        EvaluationRun.objects.select_related("evaluation_set__store__embedding_connection")
        .filter(pk=run_id, status=RunStatus.RUNNING, claimed_by=owner)
        .first()
    )


def _held(run: EvaluationRun) -> QuerySet[EvaluationRun]:
    """The run's row, while ``run``'s claim on it holds."""
    return EvaluationRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, claim_token=run.claim_token)


def _end(run: EvaluationRun, **fields: Any) -> bool:
    ended = _held(run).update(
        **fields, finished_at=timezone.now(), updated_at=timezone.now(), claimed_by="", lease_expires_at=None
    )
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
    top = ranked.documents[: metrics.NDCG_DEPTH]
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


def _record(run: EvaluationRun, question: EvaluationQuestion, score: metrics.QuestionScore, returned: list) -> bool:
    """Writes a question's outcome and renews the lease; False when the claim is gone."""
    now = timezone.now()
    try:
        with transaction.atomic():
            renewed = _held(run).update(
                questions_done=F("questions_done") + 1, lease_expires_at=now + _lease(), updated_at=now
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


def question_score(row: RunQuestion) -> metrics.QuestionScore:
    """A stored outcome as the engine's score."""
    return metrics.QuestionScore(
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
        released = _held(run).update(
            status=RunStatus.QUEUED,
            attempts=F("attempts") - 1,
            claim_token=F("claim_token") + 1,
            claimed_by="",
            lease_expires_at=None,
            updated_at=timezone.now(),
        )
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
    wants_vector = SearchOptions.for_store(store, run.config).embeds_query(store)
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
                overrides=run.config,
                query_vector=vectors.of(question) if wants_vector else None,
            )
        except ServiceError as exc:
            _fail(run, f"question {number} of {len(questions)} ({question.text[:80]!r}): {exc.message}")
            return
        score = metrics.score_question(ranked.documents, grades, ranked.latency_ms)
        if not _record(run, question, score, _returned(ranked, grades)):
            return
    scores = [question_score(row) for row in RunQuestion.objects.filter(run=run)]
    if not scores:
        _fail(run, "no question of the set could be evaluated (they were deleted while the run went on)")
        return
    _end(run, status=RunStatus.DONE, error="", summary=metrics.summarise(scores).as_dict())


def evaluation_runs_requeue_expired() -> list[int]:
    """Puts back in the queue the runs whose lease ran out (their worker stopped), or fails those
    claimed EVALUATION_MAX_ATTEMPTS times; returns the ids of the runs to send again: those put
    back, and those queued for a lease's time without being claimed (their message was lost),
    whose wait starts over."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE evaluation_runs
            SET status = CASE WHEN attempts >= %(max)s THEN %(failed)s ELSE %(queued)s END,
                error = CASE WHEN attempts >= %(max)s
                        THEN 'gave up after ' || attempts || ' attempts: ' || %(reason)s ELSE error END,
                finished_at = CASE WHEN attempts >= %(max)s THEN now() ELSE finished_at END,
                claimed_by = '', lease_expires_at = NULL, claim_token = claim_token + 1, updated_at = now()
            WHERE status = %(running)s AND lease_expires_at < now()
            RETURNING id, status
            """,
            {
                "max": settings.EVALUATION_MAX_ATTEMPTS,
                "failed": RunStatus.FAILED,
                "queued": RunStatus.QUEUED,
                "running": RunStatus.RUNNING,
                "reason": LEASE_EXPIRED,
            },
        )
        requeued = [run_id for run_id, status in cursor.fetchall() if status == RunStatus.QUEUED]
        cursor.execute(
            "UPDATE evaluation_runs SET updated_at = now() WHERE status = %s AND updated_at < now() - %s RETURNING id",
            [RunStatus.QUEUED, _lease()],
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


def evaluation_run_apply(*, run: EvaluationRun, user: AbstractBaseUser | None = None) -> StoreUpdate:
    """Saves a finished run's configuration as its store's search settings."""
    if run.status != RunStatus.DONE:
        raise Conflict(
            f"run {run.label!r} is {run.status}: only a finished run's configuration can be saved",
            code="run_not_done",
        )
    store = RagStore.objects.get(pk=run.evaluation_set.store_id)
    with transaction.atomic():
        outcome = store_update(store=store, name=store.name, values=store_settings_of(store, run.config), actor=user)
        _audit_run(run, actor=user, action="evaluation_run.apply", after={"store_id": store.pk, "config": run.config})
    return outcome
